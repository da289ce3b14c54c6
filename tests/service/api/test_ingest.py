"""NCCL records pushed over HTTP reach the detectors; bad bodies are refused with a reason."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from graywire.collectors.nccl.inspector import parse_inspector_text
from graywire.fabricsim.nccl_writer import InspectorWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.app import create_app
from graywire.service.config import load_settings

INGEST_TOKEN = "ingest-token-0123456789"


def make_client(tmp_path: Path, **overrides: Any) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        poll_interval="10s",
        max_push_bytes=4 * 2**20,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 1}],
        auth={"tokens": [{"name": "trainer", "role": "ingest", "token": INGEST_TOKEN}]},
        **overrides,
    )
    c = TestClient(create_app(settings, run_loop=False))
    c.headers["authorization"] = f"Bearer {INGEST_TOKEN}"
    return c


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path) as c:
        yield c


def push_run(
    client: TestClient, tmp_path: Path, faults: str, start: datetime | None = None, **kw: Any
) -> int:
    """Run a job's simulation, pushing each dump as the job would, one poll after each."""
    start = start or datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=130)
    job_sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), duration_s=120, seed=2, faults=faults, start=start, **kw)
    )
    writer = InspectorWriter(tmp_path / "insp")
    offsets: dict[Path, int] = {}
    runner = client.app.state.runner  # type: ignore[attr-defined]
    accepted = 0
    for step in job_sim.run():
        if step.nccl_timing is None:
            continue
        writer.write(step.nccl_timing)
        body = b""
        for f in sorted((tmp_path / "insp").rglob("*.log")):
            data = f.read_bytes()
            body += data[offsets.get(f, 0) :]
            offsets[f] = len(data)
        r = client.post(
            "/api/v1/ingest/nccl",
            params={"job": "job-000", "gpus_per_host": 8},
            content=body,
            headers={"content-type": "application/x-ndjson"},
        )
        assert r.status_code == 202, r.text
        accepted += r.json()["accepted_rows"]
        runner.tick()
    return accepted


def test_pushed_slow_channel_becomes_an_incident_that_only_watches(
    client: TestClient, tmp_path: Path
) -> None:
    accepted = push_run(client, tmp_path, "slow_channel@20s+300s=1.5:gpu-0005/mlx5_6:2")
    assert accepted == 12 * 64 * 5  # 12 pushes x 64 ranks x (whole collective + 4 channels)
    items = client.get("/api/v1/incidents", params={"kind": "nccl_channel_slow"}).json()["items"]
    assert [(i["node"], i["port"], i["evidence"]["channel"], i["evidence"]["provenance"]) for i in items] == [
        ("gpu-0005", "gpu-0005/mlx5_6", 2, "push")
    ]
    assert items[0]["entity"].startswith("push|")
    # A 2.5x slower channel, pushed: the host is watched, never drained on pushed data alone.
    drain = client.get("/api/v1/drain").json()
    assert [(d["node"], d["action"]) for d in drain] == [("gpu-0005", "watch")]
    assert drain[0]["reason"].startswith("pushed timings only")
    # The push pipeline's stages, and the bounds of its detectors' state, are on /metrics too.
    text = client.get("/metrics").text
    assert 'graywire_pipeline_stage_rows_total{stage="push/nccl_channel_outlier"}' in text
    assert 'graywire_detector_rows_over_capacity_total{stage="push/nccl_step_time"} 0.0' in text


def test_a_trusted_push_source_may_drain(tmp_path: Path) -> None:
    with make_client(tmp_path, drain={"trust_pushed": True}) as c:
        push_run(c, tmp_path, "slow_channel@20s+300s=1.5:gpu-0005/mlx5_6:2")
        drain = c.get("/api/v1/drain").json()
    assert [(d["node"], d["action"]) for d in drain] == [("gpu-0005", "drain")]


def test_pushes_naming_unknown_hosts_are_refused_or_dropped(tmp_path: Path) -> None:
    rows, _ = parse_inspector_text(inspector_record("evil-host", time.time()), "j")
    body = inspector_record("evil-host", time.time()).encode()
    with make_client(tmp_path) as c:
        r = c.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                   headers={"content-type": "application/x-ndjson"})  # fmt: skip
        assert r.status_code == 422
        assert "'evil-host'" in r.json()["detail"] and "not in the fabric model" in r.json()["detail"]
        metrics = c.get("/metrics").text
        assert 'graywire_rejected_rows_total{reason="unknown_host",record="nccl_timing"} 1.0' in metrics
        assert c.get("/api/v1/incidents").json()["count"] == 0
    with make_client(tmp_path / "drop", ingest={"unknown_hosts": "drop"}) as c:
        good = inspector_record("gpu-0001", time.time())
        r = c.post("/api/v1/ingest/nccl", params={"job": "j"}, content=(good + body.decode()).encode(),
                   headers={"content-type": "application/x-ndjson"})  # fmt: skip
        assert (r.status_code, r.json()["accepted_rows"]) == (202, len(rows))


@pytest.mark.parametrize(("offset", "message"), [(86_400, "ahead of graywire's clock"),
                                                 (-3 * 3600, "old (ingest.max_age 1h)")])  # fmt: skip
def test_pushes_dated_off_graywires_clock_are_refused(
    client: TestClient, offset: float, message: str
) -> None:
    body = inspector_record("gpu-0001", time.time() + offset).encode()
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == 422 and message in r.json()["detail"]
    client.app.state.runner.tick()  # type: ignore[attr-defined]
    assert client.get("/api/v1/incidents").json()["count"] == 0


@pytest.mark.parametrize("t", [253_402_300_000, -86_400, 9.3e9])  # 9999-12-31, 1969, past 2262
def test_a_push_dated_outside_any_real_clock_is_refused(client: TestClient, t: float) -> None:
    """A dump time no collective ran at is not stamped with the receipt time: the row is refused
    with its reason, and a push of nothing else is a 422."""
    body = inspector_record("gpu-0001", t).encode()
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == 422, r.text
    assert "line 1" in r.json()["detail"] and "dump_timestamp_us" in r.json()["detail"]


def inspector_record(host: str, t: float) -> str:
    """One self-contained Inspector v4.0 record of ``host``, dumped at ``t``."""
    return json.dumps({
        "header": {"id": "0xabc", "rank": 0, "n_ranks": 8, "nnodes": 1},
        "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": int(t * 1e6),
                     "hostname": host, "pid": 7},
        "coll_perf": {"coll": "AllReduce", "coll_sn": 3, "coll_msg_size_bytes": 1024,
                      "coll_exec_time_us": 120, "coll_busbw_gbs": 1.0},
    }) + "\n"  # fmt: skip


@pytest.mark.parametrize(
    ("body", "params", "status", "message"),
    [
        (b'{"header": {"id": 1}\n', {"job": "j"}, 422, "line 1"),
        (b"not json at all\n", {"job": "j"}, 422, "line 1"),
        (b"{}\n", {}, 422, "job"),
        (b"x" * (4 * 2**20 + 1), {"job": "j"}, 413, "limit"),
        (b"[" * 100_000, {"job": "j"}, 422, "nested"),  # small, but deeper than any parser recurses
    ],
)
def test_bad_pushes_are_refused_with_a_reason(
    client: TestClient, body: bytes, params: dict, status: int, message: str
) -> None:
    r = client.post("/api/v1/ingest/nccl", params=params, content=body,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == status
    assert message in str(r.json()["detail"])
    assert client.get("/api/v1/incidents").json()["count"] == 0


def test_push_needs_an_ingest_token(client: TestClient) -> None:
    anonymous = TestClient(client.app)
    body = b'{"header": {"id": 1}}\n'
    for headers in ({}, {"authorization": "Bearer not-a-known-token-at-all"}):
        r = anonymous.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body, headers=headers)
        assert r.status_code == 401
        assert "token" in r.json()["detail"]


def test_nccl_directory_source_is_built_from_config(tmp_path: Path) -> None:
    from graywire.service.sources import build_sources

    settings = load_settings(
        None,
        sources=[
            {"type": "fabricsim", "hosts": 8},
            {"type": "nccl", "directory": str(tmp_path), "gpus_per_host": 8},
        ],
    )
    fabric, collectors = build_sources(settings)
    assert [c.source for c in collectors] == ["fabricsim", "nccl"]
    assert collectors[1].target.endswith(str(tmp_path)) or str(tmp_path) in collectors[1].target
    assert fabric.n_ports == 256


def test_pushed_communicators_are_bounded(tmp_path: Path) -> None:
    """A flood of distinct communicators cannot grow detector state without end."""
    with make_client(tmp_path, ingest={"max_communicators": 3}) as c:
        t = time.time()

        def push(comm: str) -> Any:
            body = inspector_record("gpu-0001", t).replace('"0xabc"', json.dumps(comm)).encode()
            return c.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                          headers={"content-type": "application/x-ndjson"})  # fmt: skip

        assert [push(f"0x{i}").status_code for i in range(3)] == [202] * 3
        assert push("0x1").status_code == 202  # a known one is fine
        r = push("0x99")
        assert r.status_code == 422 and "ingest.max_communicators (3)" in r.json()["detail"]
        assert 'reason="communicator_cap"' in c.get("/metrics").text


def test_a_new_term_starts_the_pushed_communicators_over(tmp_path: Path) -> None:
    """A replica that takes the lead judges with fresh detectors: the communicators pushed under
    the earlier term hold no place in the cap any more."""
    with make_client(tmp_path, ingest={"max_communicators": 2}) as c:
        t = time.time()
        runner = c.app.state.runner  # type: ignore[attr-defined]

        def push(comm: str) -> Any:
            body = inspector_record("gpu-0001", t).replace('"0xabc"', json.dumps(comm)).encode()
            return c.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                          headers={"content-type": "application/x-ndjson"})  # fmt: skip

        assert [push(f"0x{i}").status_code for i in range(3)] == [202, 202, 422]
        runner.new_term(runner.pipeline)
        assert [push(f"0x{i}").status_code for i in range(2, 5)] == [202, 202, 422]


def test_one_jobs_communicators_cannot_crowd_out_the_others(tmp_path: Path) -> None:
    with make_client(tmp_path, ingest={"max_communicators": 10, "max_communicators_per_job": 2}) as c:
        t = time.time()

        def push(job: str, comm: str) -> Any:
            body = inspector_record("gpu-0001", t).replace('"0xabc"', json.dumps(comm)).encode()
            return c.post("/api/v1/ingest/nccl", params={"job": job}, content=body,
                          headers={"content-type": "application/x-ndjson"})  # fmt: skip

        assert [push("flood", f"0x{i}").status_code for i in range(2)] == [202] * 2
        r = push("flood", "0x2")
        assert r.status_code == 422 and "ingest.max_communicators_per_job (2)" in r.json()["detail"]
        assert [push("other", f"0x{i}").status_code for i in range(2)] == [202] * 2


def test_a_pushed_batch_is_timed_by_graywires_receipt_and_names_only_hosts(client: TestClient) -> None:
    """Half an hour old is accepted, but the detectors see graywire's clock; a switch is no host."""
    runner = client.app.state.runner  # type: ignore[attr-defined]
    body = inspector_record("gpu-0001", time.time() - 1800).encode()
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == 202
    (queued,) = list(runner._pushed)
    assert abs(queued.column("time")[0].as_py().timestamp() - time.time()) < 60
    leaf = next(n for n, role in zip(runner.fabric.node_names, runner.fabric.node_roles, strict=True)
                if role != "host")  # fmt: skip
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"},
                    content=inspector_record(leaf, time.time()).encode(),
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == 422 and "not in the fabric model" in r.json()["detail"]
