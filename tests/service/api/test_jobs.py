"""``/api/v1/jobs``: a running service's job, its findings by phase and the fabric under it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings

# One job (fabricsim's job-000 spans the hosts): a halved NIC that slows its rank's channels, a
# straggler rank, and a host whose ranks fell back from IB to sockets.
FAULTS = "speed_downgrade@15s+1h:gpu-0002/mlx5_3,straggler@15s+1h,nccl_transport_fallback@15s+1h"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 2, "faults": FAULTS}],
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        for _ in range(12):
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        yield c


def test_the_job_lists_its_findings_by_phase_and_the_downgrade_under_it(client: TestClient) -> None:
    incidents = client.get("/api/v1/incidents", params={"limit": 1000}).json()["items"]
    by_kind = {i["kind"]: i for i in incidents}
    assert {"speed_downgrade", "nccl_straggler", "nccl_transport_fallback"} <= set(by_kind)
    jobs = client.get("/api/v1/jobs").json()
    assert [j["job"] for j in jobs["items"]] == ["job-000"] and jobs["count"] == 1
    job = jobs["items"][0]
    assert job["worst_severity"] == "critical" and "gpu-0002" in job["hosts"]
    counts = job["counts"]
    assert counts["data_path"] >= 1 and counts["steady_state"] >= 1 and counts["fabric"] == 1

    d = client.get("/api/v1/jobs/job-000").json()
    assert [p["label"] for p in d["phases"]] == ["start-up", "data path", "steady state", "fault path"]
    kinds = {p["phase"]: {i["kind"] for i in p["incidents"]} for p in d["phases"]}
    assert kinds["start_up"] == set() and kinds["fault_path"] == set()
    assert kinds["data_path"] == {"nccl_transport_fallback"}
    assert {"nccl_straggler", "nccl_channel_slow"} <= kinds["steady_state"]
    (link,) = d["fabric"]
    assert (link["id"], link["port"]) == (by_kind["speed_downgrade"]["id"], "gpu-0002/mlx5_3")
    # The slow channel behind the halved NIC folds under it, in the job's view too.
    slow = [i for p in d["phases"] for i in p["incidents"] if i["caused_by"] == link["id"]]
    assert slow and {i["id"] for i in slow} <= set(link["effects"])
    assert sum(len(p["incidents"]) for p in d["phases"]) + 1 == d["incident_count"]


def test_an_unknown_job_is_a_404_naming_it(client: TestClient) -> None:
    r = client.get("/api/v1/jobs/no-such-job")
    assert r.status_code == 404 and "no-such-job" in r.json()["detail"]
