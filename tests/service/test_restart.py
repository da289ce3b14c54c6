"""A restart hands the open incidents back to their detectors: a fault repaired while graywire
was down resolves on the first healthy polls after it, and its host returns to service after
the clean window, as it would have without the restart."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings

PORT = "gpu-0001/mlx5_3"
FAULTS = f"speed_downgrade@0s+1h:{PORT},pfc_storm@0s+1h:gpu-0002/mlx5_1"


def serve(tmp_path: Path, db_url: str, faults: str) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": faults}],
        drain={"shadow": False, "clean_window": "10m"},
    )
    return TestClient(create_app(settings, run_loop=False))


def ticks(client: TestClient, n: int) -> None:
    for _ in range(n):
        client.app.state.runner.tick()  # type: ignore[attr-defined]


def incidents(client: TestClient) -> dict[str, dict[str, Any]]:
    items = client.get("/api/v1/incidents", params={"limit": 100}).json()["items"]
    return {i["kind"]: i for i in items}


@pytest.fixture
def faulty_then_restarted(tmp_path: Path, db_url: str) -> Iterator[tuple[dict[str, Any], TestClient]]:
    """A service that opened incidents and drained a host, stopped; then a new process on the
    same database with the fault repaired meanwhile."""
    with serve(tmp_path, db_url, FAULTS) as first:
        ticks(first, 8)
        before = incidents(first)
        assert before["speed_downgrade"]["status"] == "open"
        assert "gpu-0001" in {d["node"] for d in first.get("/api/v1/drain").json()}
    with serve(tmp_path, db_url, faults="") as second:
        yield before, second


def test_a_fault_repaired_during_a_restart_resolves_and_its_host_returns(
    faulty_then_restarted: tuple[dict[str, Any], TestClient],
) -> None:
    before, c = faulty_then_restarted
    ticks(c, 12)  # the slowest detector's window (NCCL channels: 5 polls) and its close_after
    after = incidents(c)
    assert after["speed_downgrade"]["id"] == before["speed_downgrade"]["id"]
    # The link's own incidents, and the slow NCCL channels it caused on its host's rank.
    assert {k: i["status"] for k, i in after.items()} == {
        "speed_downgrade": "resolved",
        "pfc_storm": "resolved",
        "nccl_channel_slow": "resolved",
    }
    # Still drained within the clean window; back once it has passed with nothing open.
    assert "gpu-0001" in {d["node"] for d in c.get("/api/v1/drain").json()}
    drain = c.app.state.drain  # type: ignore[attr-defined]
    later = datetime.now(drain.clock().tzinfo) + timedelta(minutes=11)
    drain.clock = lambda: later
    ticks(c, 1)
    assert c.get("/api/v1/drain").json() == []


def test_a_fault_still_there_after_a_restart_stays_one_open_incident(tmp_path: Path, db_url: str) -> None:
    with serve(tmp_path, db_url, FAULTS) as first:
        ticks(first, 8)
        before = incidents(first)
    with serve(tmp_path, db_url, FAULTS) as second:
        ticks(second, 6)
        after = incidents(second)
        assert "gpu-0001" in {d["node"] for d in second.get("/api/v1/drain").json()}
    assert after["speed_downgrade"]["status"] == "open"
    assert after["speed_downgrade"]["id"] == before["speed_downgrade"]["id"]
    assert after["speed_downgrade"]["reopen_count"] == before["speed_downgrade"]["reopen_count"]


def test_an_incident_no_detector_takes_back_stays_open_and_says_why(tmp_path: Path, db_url: str) -> None:
    """A straggler's incident is not taken back (its detector's windows are per collective):
    after a restart it is unknown, not healthy, and its evidence says so."""
    with serve(tmp_path, db_url, f"straggler@0s+1h:{PORT}") as first:
        ticks(first, 12)
        (before,) = [i for i in incidents(first).values() if i["kind"] == "nccl_straggler"]
        assert "unjudged" not in before["evidence"]
    with serve(tmp_path, db_url, faults="") as second:
        ticks(second, 1)
        after = second.get(f"/api/v1/incidents/{before['id']}").json()
    assert after["status"] == "open"
    assert "no detector judges this incident again" in after["evidence"]["unjudged"]
