"""Shared fixtures: a small simulated fabric behind a fake UFM served over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm
from tests.collectors.ufm.httpserver import serve

#: 4 hosts x 8 GPUs: 128 ports; gpu-0003/mlx5_2 drops from 800G to 400G at 30 s.
DOWNGRADE = "speed_downgrade@30s+300s:gpu-0003/mlx5_2"


def make_sim(faults: str = DOWNGRADE, seed: int = 1) -> FabricSim:
    return FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), interval_s=10.0, duration_s=600.0, seed=seed, faults=faults)
    )


@pytest.fixture
def fake() -> FakeUfm:
    return FakeUfm(make_sim(), username="admin", password="s3cret", token="tok-abc123")


@pytest.fixture
def ufm_url(fake: FakeUfm) -> Iterator[str]:
    with serve(fake.app) as url:
        yield url
