"""Fabric-wide scenarios through the whole service: fabricsim -> detectors -> store -> policy -> API.

64 hosts, 8 rails, 32 hosts per leaf. A leaf that fails takes all 32 of its host links down
to 400G at once: that must be one network incident and no host drain. Real faults on 15% of
the hosts (each on a different leaf, so no switch is to blame) must trip the breaker at 10%.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings

HOSTS = 64
# Every host port of leaf-r2-000 (hosts 0..31, rail 2): the leaf fails as a whole.
LEAF_FAILURE = ",".join(f"speed_downgrade@15s+1h:gpu-{h:04d}/mlx5_2" for h in range(32))
# 10 of 64 hosts (15.6%), each behind a different leaf: 8 in the first group, 2 in the second.
SPREAD_HOSTS = [*range(8), 32, 33]
SPREAD_FAULTS = ",".join(
    f"{'speed' if i % 2 else 'width'}_downgrade@15s+1h:gpu-{h:04d}/mlx5_{h % 8}"
    for i, h in enumerate(SPREAD_HOSTS)
)


def run(tmp_path: Path, db_url: str, faults: str, polls: int = 5) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": HOSTS, "seed": 7, "faults": faults}],
        drain={"shadow": False},
    )
    client = TestClient(create_app(settings, run_loop=False))
    client.__enter__()
    for _ in range(polls):
        client.app.state.runner.tick()  # type: ignore[attr-defined]
    return client


@pytest.fixture
def leaf_failure(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    client = run(tmp_path, db_url, LEAF_FAILURE)
    yield client
    client.__exit__(None, None, None)


@pytest.fixture
def spread_faults(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    client = run(tmp_path, db_url, SPREAD_FAULTS)
    yield client
    client.__exit__(None, None, None)


def test_a_failing_leaf_is_one_network_incident_and_no_host_drain(leaf_failure: TestClient) -> None:
    c = leaf_failure
    links = c.get("/api/v1/incidents", params={"kind": "speed_downgrade", "limit": 1000}).json()["items"]
    assert len(links) == 32  # the evidence: every host link of the leaf
    network = c.get("/api/v1/incidents", params={"kind": "switch_failure"}).json()["items"]
    assert [(i["entity"], i["status"], i["severity"]) for i in network] == [
        ("leaf-r2-000", "open", "critical")
    ]
    assert network[0]["evidence"]["hosts"] == [f"gpu-{h:04d}" for h in range(32)]
    assert "32 hosts" in network[0]["summary"]
    assert c.get("/api/v1/drain").json() == []
    assert c.get("/api/v1/audit", params={"action": "drain"}).json()["items"] == []
    state = c.get("/api/v1/drain/state").json()["circuit_breaker"]
    assert (state["tripped"], state["recent_drains"]) == (False, 0)
    verdicts = {v["node"]: v for v in c.get("/api/v1/nodes", params={"limit": 100}).json()["items"]}
    assert verdicts["leaf-r2-000"]["side"] == "network"
    assert verdicts["gpu-0005"]["blamed_switch"] == "leaf-r2-000"


def test_real_faults_on_15_percent_of_hosts_trip_the_breaker_at_the_cap(spread_faults: TestClient) -> None:
    c = spread_faults
    nodes = {v["node"]: v for v in c.get("/api/v1/nodes").json()["items"]}
    assert {n for n, v in nodes.items() if v["side"] == "link"} == {f"gpu-{h:04d}" for h in SPREAD_HOSTS}
    drains = c.get("/api/v1/drain", params={"action": "drain"}).json()
    held = c.get("/api/v1/drain", params={"action": "watch"}).json()
    cap = int(0.10 * HOSTS)  # 6
    assert (len(drains), len(held)) == (cap, len(SPREAD_HOSTS) - cap)
    assert all("held by the drain circuit breaker" in h["reason"] for h in held)
    state = c.get("/api/v1/drain/state").json()["circuit_breaker"]
    assert (state["tripped"], state["recent_drains"], state["cap"]) == (True, cap, cap)
    assert "reached the cap of 6" in state["message"] and state["since"] is not None
    alert = c.get("/api/v1/incidents", params={"kind": "drain_circuit_breaker"}).json()["items"]
    assert [(i["entity"], i["status"], i["severity"]) for i in alert] == [("fabric", "open", "critical")]
    assert "graywire_drain_circuit_breaker_tripped 1.0" in c.get("/metrics").text
    audit = c.get("/api/v1/audit", params={"limit": 1000}).json()["items"]
    assert [a["action"] for a in audit].count("drain") == cap
    assert [a["action"] for a in audit].count("breaker_trip") == 1
    assert [a["action"] for a in audit].count("hold") == len(SPREAD_HOSTS) - cap
