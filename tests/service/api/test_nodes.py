"""``/api/v1/nodes``: verdicts from the live incidents of a running service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings

LEAF_FAULTS = ",".join(f"speed_downgrade@15s+1h:gpu-000{h}/mlx5_2" for h in (1, 2, 3))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        sources=[
            {
                "type": "fabricsim",
                "hosts": 8,
                "seed": 2,
                "faults": LEAF_FAULTS + ",slow_channel@15s+1h=0.3:gpu-0006/mlx5_5:1",
            }
        ],
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        for _ in range(8):
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        yield c


def test_a_failing_leaf_is_one_network_verdict_and_a_slow_rank_is_its_host(client: TestClient) -> None:
    body = client.get("/api/v1/nodes").json()
    v = {i["node"]: i for i in body["items"]}
    assert v["leaf-r2-000"]["side"] == "network"
    assert len(v["leaf-r2-000"]["incident_ids"]) == 3
    for h in ("gpu-0001", "gpu-0002", "gpu-0003"):
        assert (v[h]["side"], v[h]["blamed_switch"]) == ("network", "leaf-r2-000")
    assert v["gpu-0006"]["side"] == "host"
    assert body["items"][0]["node"] == "leaf-r2-000"


def test_one_node_with_its_ports_and_incidents(client: TestClient) -> None:
    n = client.get("/api/v1/nodes/gpu-0002").json()
    assert (n["role"], n["verdict"]["side"]) == ("host", "network")
    assert len(n["ports"]) == 8 and "gpu-0002/mlx5_2" in n["ports"]
    # The halved NIC also slows its rank's NCCL channels: both incidents belong to the node.
    assert "speed_downgrade" in {i["kind"] for i in n["incidents"] if i["port"] == "gpu-0002/mlx5_2"}
    healthy = client.get("/api/v1/nodes/gpu-0007").json()
    assert healthy["verdict"] is None and healthy["incidents"] == []
    r = client.get("/api/v1/nodes/no-such-node")
    assert r.status_code == 404 and "not in the fabric model" in r.json()["detail"]
