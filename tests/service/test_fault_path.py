"""The fault path, end to end: fabricsim's link failure -> the rank on it dead -> one page.

A host NIC's link fails for good; the NCCL rank on it aborts and NCCL RAS reports it
unresponsive, then dead (fabricsim/ras.py, read back by the RAS parser as a ``nccl_ras`` source
would). The link is the root cause: it is the one page; the rank folds under it with the
seconds between them; the host is drained for the link.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from graywire.collectors.nccl.ras import NcclRasCollector
from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.sources import build_sources
from tests.collectors.nccl.test_rank_files import job_files


def test_a_dead_rank_after_its_link_failed_is_one_page_and_its_host_is_drained(
    tmp_path: Path, db_url: str
) -> None:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 7, "faults": "rank_dead@15s:gpu-0003/mlx5_2"}],
        drain={"shadow": False},
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        for _ in range(14):  # 140 s: the IB retries, the abort, RAS's 60 s before "dead"
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        items = c.get("/api/v1/incidents", params={"status": "open", "limit": 100}).json()["items"]
        (link,) = [i for i in items if i["kind"] == "link_missing"]
        (dead,) = [i for i in items if i["kind"] == "nccl_rank_dead"]
        assert link["port"] == "gpu-0003/mlx5_2" and link["severity"] == "critical"
        assert dead["node"] == "gpu-0003" and dead["port"] == "gpu-0003/mlx5_2"
        assert "rank 26 of job job-000" in dead["summary"]
        assert dead["caused_by"] == link["id"]
        assert "its mlx5_2 link" in dead["cause_reason"] and "s before" in dead["cause_reason"]
        assert [i["id"] for i in items if i["caused_by"] is None] == [link["id"]]  # one root, one page
        (drain,) = c.get("/api/v1/drain").json()
        assert (drain["node"], drain["action"]) == ("gpu-0003", "drain")
        assert link["id"] in drain["incident_ids"]


def test_an_nccl_ras_source_is_built_from_its_yaml(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        sources=[
            {"type": "fabricsim", "hosts": 4},
            {"type": "nccl_ras", "job": "1234567", "port": 28100, "host_names": {"172.16.64.1": "gpu-0000"}},
        ],
    )
    _, collectors = build_sources(settings)
    (ras,) = [c for c in collectors if isinstance(c, NcclRasCollector)]
    assert (ras.job, ras.target, ras.host_names) == (
        "1234567",
        "localhost:28100",
        {"172.16.64.1": "gpu-0000"},
    )


def test_a_flight_recorder_dump_and_a_watchdog_line_are_a_stuck_collective_naming_the_rank_behind(
    tmp_path: Path, db_url: str
) -> None:
    root = tmp_path / "nccl"
    job_files(root)
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[
            {"type": "fabricsim", "hosts": 8, "seed": 7},
            {
                "type": "nccl",
                "directory": str(root),
                "pattern": "*/*-pid*.log",
                "flight_recorder_pattern": "*/*/nccl_trace_rank_*",
                "watchdog_pattern": "*/*/*.err",
                "host_regex": r"^[^/]+/(?P<host>[^/]+)/",
            },
        ],
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        c.app.state.runner.tick()  # type: ignore[attr-defined]
        items = c.get("/api/v1/incidents", params={"status": "open", "limit": 100}).json()["items"]
        (stuck,) = [i for i in items if i["kind"] == "nccl_collective_stuck"]
        assert stuck["node"] == "gpu-0005"  # the rank that never launched all_reduce #3
        assert "job job-42" in stuck["summary"] and "rank 1" in stuck["summary"]
        assert "timed out on 2 rank(s)" in stuck["summary"]  # the dump and the watchdog line of rank 0
        assert not [i for i in items if i["kind"] not in ("nccl_collective_stuck",)]
