"""``inventory: discover``: the service builds its model from its UFM source, keeps it across
restarts, and finds a fault against expectations it discovered."""

from __future__ import annotations

from pathlib import Path

import pytest

from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm
from graywire.service.config import load_settings
from graywire.service.discovery import DISCOVERED
from graywire.service.runner import Runner
from graywire.service.sources import build_sources
from tests.collectors.ufm.httpserver import serve

NIC = "gpu-0003/mlx5_2"


def _sim(faults: str = "none") -> FabricSim:
    return FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), interval_s=10.0, duration_s=600.0, seed=1, faults=faults)
    )


def _settings(tmp_path: Path, url: str) -> object:
    ufm = {
        "type": "ufm",
        "url": url,
        "username": "admin",
        "password": "pw",
        "telemetry_url": f"{url}/metrics",
    }
    return load_settings(
        None, data_dir=tmp_path, inventory="discover", sources=[ufm], archive={"enabled": False}
    )


def test_the_model_is_discovered_once_and_kept(tmp_path: Path) -> None:
    sim = _sim()
    with serve(FakeUfm(sim, username="admin", password="pw").app) as url:
        settings = _settings(tmp_path, url)
        fabric, collectors = build_sources(settings)  # type: ignore[arg-type]
        assert sorted(fabric.keys) == sorted(sim.fabric.keys)
        idx = fabric.lookup(sim.fabric.key_array)
        assert fabric.expected_speed_bps[idx].tolist() == sim.fabric.expected_speed_bps.tolist()
        assert fabric.rail[idx].tolist() == sim.fabric.rail.tolist()
        assert collectors, "the UFM source's collectors are built over the discovered model"
    written = tmp_path / DISCOVERED
    before = written.read_text()
    # A restart with UFM away still starts: the model is the one discovered first.
    again, _ = build_sources(settings)  # type: ignore[arg-type]
    assert sorted(again.keys) == sorted(fabric.keys) and written.read_text() == before


def test_a_downgrade_is_found_against_discovered_expectations(tmp_path: Path) -> None:
    sim = _sim(f"speed_downgrade@30s+600s:{NIC}")
    fake = FakeUfm(sim, username="admin", password="pw")
    with serve(fake.app) as url:
        settings = _settings(tmp_path, url)
        fabric, collectors = build_sources(settings)  # type: ignore[arg-type]
        from graywire.service.db import make_engine, upgrade
        from graywire.service.fabric_state import StateBoard
        from graywire.service.store import IncidentStore

        db = f"sqlite:///{tmp_path / 'g.db'}"
        upgrade(db)
        store = IncidentStore(make_engine(db))
        runner = Runner(settings, fabric, collectors, store, StateBoard(fabric))  # type: ignore[arg-type]
        found = []
        for _ in range(8):
            fake.advance()
            found += runner.tick()
    downgrades = [(f.kind, f.status, f.port) for f in found if f.kind == "speed_downgrade"]
    assert downgrades == [("speed_downgrade", "firing", NIC)]
    assert {f.kind for f in found} == {"speed_downgrade"}


def test_bad_discovery_rules_are_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"discovery\.expect: .*role=host"):
        load_settings(None, data_dir=tmp_path, inventory="discover", discovery={"expect": ["role=host"]})
    with pytest.raises(ValueError, match=r"discovery\.purpose: .*mlx5_8=gpu"):
        load_settings(None, data_dir=tmp_path, discovery={"purpose": ["mlx5_8=gpu"]})
