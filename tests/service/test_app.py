"""The assembled service: a poll loop over fabricsim into the store, API, metrics and archive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.dataset import iter_polls, iter_replay
from graywire.detectors.pipeline import Pipeline
from graywire.service.app import create_app
from graywire.service.config import Settings, load_settings


def settings_of(tmp_path: Path, db_url: str, *sources: dict, **more: Any) -> Settings:
    """A service config polling every 10 s into ``tmp_path``: the 8-host simulator (seed 3)
    unless ``sources`` are given."""
    return load_settings(
        None,
        data_dir=tmp_path / "data",
        database_url=db_url,
        poll_interval="10s",
        sources=list(sources) or [{"type": "fabricsim", "hosts": 8, "seed": 3}],
        **more,
    )


@pytest.fixture
def app_client(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    downgrade = "speed_downgrade@15s+100s:gpu-0002/mlx5_5"
    settings = settings_of(
        tmp_path, db_url, {"type": "fabricsim", "hosts": 8, "seed": 3, "faults": downgrade}
    )
    app = create_app(settings, run_loop=False)
    with TestClient(app) as client:
        yield client


def ticks(client: TestClient, n: int) -> list:
    runner = client.app.state.runner  # type: ignore[attr-defined]
    return [f for _ in range(n) for f in runner.tick()]


def test_downgrade_becomes_an_incident_naming_port_and_node(app_client: TestClient) -> None:
    found = ticks(app_client, 5)  # polls at 0..40 s; the fault starts at 15 s
    assert [(f.kind, f.status) for f in found] == [("speed_downgrade", "firing")]
    body = app_client.get("/api/v1/incidents", params={"status": "open"}).json()
    assert body["count"] == 1
    inc = body["items"][0]
    assert inc["kind"] == "speed_downgrade"
    assert inc["node"] == "gpu-0002"
    assert inc["port"] == "gpu-0002/mlx5_5"
    assert inc["evidence"]["expected"]["speed_bps"] == 800 * 10**9
    assert inc["evidence"]["actual"]["gpu-0002/mlx5_5"]["speed_bps"] == 400 * 10**9
    detail = app_client.get(f"/api/v1/incidents/{inc['id']}").json()
    assert detail["findings"][0]["status"] == "firing"


def test_incident_resolves_when_speed_is_restored(app_client: TestClient) -> None:
    found = ticks(app_client, 15)  # the fault ends at 115 s
    link = [(f.kind, f.status) for f in found if f.kind == "speed_downgrade"]
    assert link == [("speed_downgrade", "firing"), ("speed_downgrade", "cleared")]
    # The halved NIC also slows its rank's NCCL channels: same host, found as a consequence.
    assert {f.node for f in found} == {"gpu-0002"}
    items = app_client.get("/api/v1/incidents", params={"kind": "speed_downgrade"}).json()["items"]
    assert [i["status"] for i in items] == ["resolved"]


def test_metrics_expose_graywire_series_in_base_units(app_client: TestClient) -> None:
    ticks(app_client, 4)
    text = app_client.get("/metrics").text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line[:1] != "#"}
    assert samples["graywire_polls_total"] == 4
    assert samples["graywire_ports"] == 256
    assert samples['graywire_incidents_open{kind="speed_downgrade",severity="critical"}'] == 1
    key = 'graywire_port_speed_bytes_per_second{node="gpu-0002",port="gpu-0002/mlx5_5"}'
    assert samples[key] == 400e9 / 8
    exp = 'graywire_port_expected_speed_bytes_per_second{node="gpu-0002",port="gpu-0002/mlx5_5"}'
    assert samples[exp] == 800e9 / 8
    assert samples['graywire_ingested_rows_total{record="port_sample"}'] == 4 * 256


def test_healthz_reports_polls_and_database(app_client: TestClient) -> None:
    ticks(app_client, 2)
    r = app_client.get("/healthz")
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["problems"]) == ("ok", [])
    assert r.json()["polls"] == 2
    assert r.json()["database"] == "ok"


def test_healthz_says_partial_and_why_when_a_target_fails(tmp_path: Path, db_url: str) -> None:
    """A source that never answers beside one that does: the process is alive (200) but the
    fabric is not wholly seen, so the status is not ok and the problem is named.
    Changed: every SNMP target of a fabric failed for minutes while /healthz said ok."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = settings_of(
        tmp_path, db_url, {"type": "fabricsim", "hosts": 8, "seed": 3}, {"type": "agent", "urls": [dead]}
    )
    with TestClient(create_app(settings, run_loop=False)) as client:
        ticks(client, 2)
        r = client.get("/healthz")
        metrics = client.get("/metrics").text
    body = r.json()
    # Every configured source has its unmatched-rows series from 0, data or none.
    assert 'graywire_unmatched_rows_total{source="agent"} 0.0' in metrics
    assert r.status_code == 200 and body["status"] == "partial"
    assert body["targets_failing"] == 1
    assert body["problems"][0] == f"1 of 2 targets failing: agent {dead}"


def test_a_source_that_reads_only_lines_it_cannot_parse_is_not_ok(
    tmp_path: Path, db_url: str, real_fixtures: Path
) -> None:
    """The Inspector record as NCCL's README prints it (pretty, over many lines) where the
    plugin writes one object a line: every line is skipped. The scrape succeeds, yet nothing
    was read, so /healthz and the sources table say so, and keep saying it while no new lines
    come. Changed: the source showed ok with 0 samples and nothing in the log."""
    job = tmp_path / "nccl" / "4711"
    job.mkdir(parents=True)
    pretty = (real_fixtures / "nccl" / "nccl_inspector_readme_coll_perf_example.json").read_text()
    (job / "node-01-pid100.log").write_text(pretty)
    nccl = {"type": "nccl", "directory": str(tmp_path / "nccl"), "pattern": "*/*-pid*.log"}
    settings = settings_of(tmp_path, db_url, {"type": "fabricsim", "hosts": 8, "seed": 3}, nccl)
    with TestClient(create_app(settings, run_loop=False)) as client:
        for _ in range(2):  # the second scrape reads no new line: what the first said stands
            ticks(client, 1)
            body = client.get("/healthz").json()
            (nccl,) = [t for t in client.get("/api/v1/sources").json()["items"] if t["source"] == "nccl"]
            assert body["status"] == "partial"
            assert any("read nothing but lines they could not parse: nccl" in p for p in body["problems"])
            assert nccl["ok"] and nccl["samples"] == 0 and nccl["skipped"] == pretty.count("\n")
            assert nccl["note"].startswith("read nothing: ") and "line 1: not JSON" in nccl["note"]


def test_detector_settings_from_the_config_reach_the_running_pipeline(tmp_path: Path, db_url: str) -> None:
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        database_url=db_url,
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 3}],
        detectors={"nccl_bootstrap": {"stall_timeout_s": 45}, "nccl_straggler": {"min_ranks": 3}},
    )
    with TestClient(create_app(settings, run_loop=False)) as client:
        runner = client.app.state.runner  # type: ignore[attr-defined]
        ticks(client, 1)
        mine = {d.name: d for d in runner.pipeline.detectors}
        pushed = {d.name: d for d in runner.push_pipeline.detectors}
    assert mine["nccl_bootstrap"].cfg.stall_timeout_s == 45.0
    assert mine["nccl_straggler"].cfg.min_ranks == pushed["nccl_straggler"].cfg.min_ranks == 3


def test_archive_replays_to_the_same_findings(tmp_path: Path, app_client: TestClient) -> None:
    live = ticks(app_client, 6)  # a downgrade at 15 s, and its rank's slow NCCL channels
    runner = app_client.app.state.runner  # type: ignore[attr-defined]
    runner.close()  # closes the open Parquet files so they can be read
    root = tmp_path / "data" / "archive"
    assert sorted(p.name for p in (root / "port_sample").iterdir())[0].startswith("hour=")
    assert (root / "inventory.json").exists()
    assert len(list(iter_polls(root, "port_sample"))) == 6
    assert len(list(iter_polls(root, "nccl_timing"))) == 5  # the first poll has no timings yet
    pipe = Pipeline(runner.fabric)
    replayed = [f for b in iter_replay(root) for f in pipe.process(b)]
    assert live
    assert [(f.kind, f.entity, f.time) for f in replayed] == [(f.kind, f.entity, f.time) for f in live]


def test_sources_api_and_scrape_metrics(app_client: TestClient) -> None:
    ticks(app_client, 2)
    body = app_client.get("/api/v1/sources").json()
    assert body["stale_ports"] == 0
    (t,) = body["items"]
    assert (t["source"], t["target"], t["ok"], t["scrapes"], t["failures"]) == (
        "fabricsim",
        "fabricsim:8-hosts",
        True,
        2,
        0,
    )
    # port samples + NCCL rows (8 hosts x 8 GPUs x 4 channels) + the 64 ranks' wiring (first NCCL poll)
    assert t["samples"] == 256 + 64 * 4 + 64
    text = app_client.get("/metrics").text
    target = {"source": "fabricsim", "target": "fabricsim:8-hosts"}
    families = text_string_to_metric_families(text)
    got = {s.name: s.value for f in families for s in f.samples if s.labels == target}
    assert (got["graywire_scrape_success"], got["graywire_stale_ports"]) == (1, 0)


def test_openapi_documents_every_error_the_service_sends(app_client: TestClient) -> None:
    """413, 431, 503 and a 422 whose detail may be a sentence, on every route; 401 too."""
    spec = app_client.get("/openapi.json").json()
    detail = spec["components"]["schemas"]["ValidationErrorOut"]["properties"]["detail"]
    assert {"type": "string"} in detail["anyOf"] and any(s.get("type") == "array" for s in detail["anyOf"])
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            assert {"400", "401", "413", "422", "431", "503"} <= codes, (method, path, codes)
            ref = op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ValidationErrorOut"), (method, path)


def test_a_single_process_says_it_runs_no_cluster(app_client: TestClient) -> None:
    assert app_client.get("/api/v1/cluster").json() == {
        "enabled": False, "member_id": None, "role": "single", "leader": None, "leader_url": None,
        "fencing_token": None, "members": [], "targets_owned": 0, "targets": 0, "fence_refusals": 0,
        "takeovers": 0, "nats_connected": False,
    }  # fmt: skip
    assert app_client.get("/healthz").json()["role"] == "single"
    assert "graywire_cluster_" not in app_client.get("/metrics").text
