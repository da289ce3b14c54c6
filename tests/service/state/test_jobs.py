"""The job view's grouping: which incidents are a job's, under which phase, and in what order."""

from __future__ import annotations

from typing import Any

from graywire.detectors.findings import JOB_PHASES
from graywire.service.state.jobs import job_views

ROLES = {"gpu-0001": "host", "gpu-0002": "host", "gpu-0009": "host", "leaf-1": "leaf"}


def _inc(
    i: int, kind: str, severity: str = "warning", node: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": i, "kind": kind, "entity": extra.pop("entity", f"{kind}-{i}"), "status": "open",
        "severity": severity, "summary": f"{kind} {i}", "node": node, "port": extra.pop("port", None),
        "link": extra.pop("link", None), "opened_at": f"2026-01-01T00:{i:02d}:00+00:00",
        "last_seen_at": "2026-01-01T01:00:00+00:00", "caused_by": extra.pop("caused_by", None),
        "cause_reason": None, "effects": extra.pop("effects", []), "evidence": extra,
    }  # fmt: skip


def test_a_jobs_incidents_fall_under_their_phases_in_life_order_with_the_fabric_under_it() -> None:
    rows = [
        _inc(1, "nccl_channel_slow", node="gpu-0001", job="j1", caused_by=2),
        _inc(2, "speed_downgrade", "critical", node="gpu-0001", port="gpu-0001/mlx5_3", effects=[1]),
        _inc(3, "nccl_bootstrap_stall", node="gpu-0002", job="j1"),
        _inc(4, "gpu_nic_affinity", node="gpu-0002", port="gpu-0002/mlx5_1"),  # per host: no job
        _inc(5, "nccl_rank_dead", "critical", node="gpu-0002", job="j1"),
        _inc(6, "nccl_job_slowdown", entity="j1"),  # the entity is the job
        _inc(7, "uplink_imbalance", node="leaf-1", port="leaf-1/p33", job="j1"),  # its node is a leaf
        _inc(8, "link_flap", link="leaf-1/p1<->gpu-0009/mlx5_0"),  # not under j1: another host
        _inc(9, "checkpoint_on_compute", entity="compute", hosts=12),  # fleet-wide: names no job or host
        _inc(10, "nccl_straggler", "critical", node="gpu-0001", job="j1"),
    ]
    (view,) = job_views(rows, ROLES)
    d = view.detail()
    assert (d["job"], d["hosts"], d["worst_severity"]) == ("j1", ["gpu-0001", "gpu-0002"], "critical")
    assert [p["phase"] for p in d["phases"]] == [p.value for p in JOB_PHASES]
    by_phase = {p["phase"]: [i["id"] for i in p["incidents"]] for p in d["phases"]}
    # Worst first, then the oldest.
    assert by_phase == {"start_up": [3], "data_path": [4], "steady_state": [10, 1, 6, 7], "fault_path": [5]}
    assert [i["id"] for i in d["fabric"]] == [2]
    assert d["counts"] == {"start_up": 1, "data_path": 1, "steady_state": 4, "fault_path": 1, "fabric": 1}
    slow = d["phases"][2]["incidents"][1]
    assert (slow["caused_by"], d["fabric"][0]["effects"]) == (2, [1])
    assert "evidence" not in slow  # the view is a brief; the incident's own route has the rest


def test_jobs_are_listed_worst_first_and_unknown_or_fleet_wide_findings_join_none() -> None:
    rows = [
        _inc(1, "nccl_init_slow", "info", node="gpu-0009", job="small"),
        _inc(2, "nccl_rank_unresponsive", "warning", node="gpu-0001", job="big"),
        _inc(3, "speed_downgrade", "critical", node="gpu-0001", port="gpu-0001/mlx5_0"),
        _inc(4, "drain_circuit_breaker", "critical", entity="fabric"),
        _inc(5, "some_future_kind", "critical", node="gpu-0001", job="big"),
        _inc(6, "checkpoint_on_compute", entity="compute"),
    ]
    views = job_views(rows, ROLES)
    # big's worst is the critical link under it; a kind with no phase is placed nowhere.
    assert [(v.job, v.worst_severity) for v in views] == [("big", "critical"), ("small", "info")]
    assert [i["id"] for i in views[0].incidents] == [2, 3]
    assert job_views([rows[2], rows[3], rows[5]], ROLES) == []  # no job named: no job made up


def test_a_host_count_or_a_switch_is_never_taken_for_a_jobs_host() -> None:
    rows = [
        _inc(1, "nccl_init_slow", job="j", hosts=4),
        _inc(2, "uplink_imbalance", node="leaf-1", job="j"),
        _inc(3, "speed_downgrade", node="leaf-1", port="leaf-1/p33"),
        _inc(4, "nccl_collective_stuck", job="j", host="gpu-0009", hosts=["gpu-0002", 7]),
    ]
    (view,) = job_views(rows, ROLES)
    assert view.hosts == ["gpu-0002", "gpu-0009"]
    assert view.summary()["counts"]["fabric"] == 0


def test_a_host_finding_joins_the_job_whose_timings_come_from_that_host() -> None:
    """No incident of j2 names gpu-0009; its NCCL timings do (``FabricState.job_hosts``)."""
    rows = [_inc(1, "gpu_nic_affinity", node="gpu-0009", port="gpu-0009/mlx5_1")]
    assert job_views(rows, ROLES) == []  # nothing to place it by
    (view,) = job_views(rows, ROLES, {"j2": ["gpu-0009", "gpu-0002"]})
    d = view.detail()
    assert (d["job"], d["hosts"]) == ("j2", ["gpu-0002", "gpu-0009"])
    assert [i["id"] for p in d["phases"] if p["phase"] == "data_path" for i in p["incidents"]] == [1]
    assert job_views(rows, ROLES, {"j3": ["gpu-0001"]}) == []  # a job elsewhere gets nothing
