"""A real Prometheus scrapes a running graywire, evaluates the rules, and answers every
dashboard query: the PromQL is valid and the panels have data, not only the right names. The
sources' raw counters work with ``rate()`` there, as any exporter's do."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from graywire.fabricsim.live import serve_app
from graywire.service.app import create_app
from graywire.service.config import load_settings
from tests.scrape import ALERTS, in_ci

pytestmark = pytest.mark.alone  # real processes against wall-clock deadlines

PROMETHEUS = "prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary() -> str:
    found = shutil.which(PROMETHEUS) or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
    )
    if found:
        return found
    reason = "prometheus not found (apt-get install prometheus)"
    if in_ci():
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, deploy_dir: Path) -> Iterator[str]:
    """Prometheus (1 s scrapes and rule evaluations) over graywire polling fabricsim every second."""
    binary = prometheus_binary()
    tmp = tmp_path_factory.mktemp("prom")
    settings = load_settings(
        None,
        data_dir=tmp / "gw",
        poll_interval="1s",
        sources=[
            {
                "type": "fabricsim",
                "hosts": 8,
                "seed": 3,
                "faults": "speed_downgrade@1s+3600s:gpu-0002/mlx5_5,slow_channel@1s+3600s=0.3",
            }
        ],
        alerts=ALERTS,
    )
    gw_port, prom_port = free_port(), free_port()
    rules = []
    for path in sorted((deploy_dir / "prometheus" / "rules").glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        for g in doc["groups"]:
            g.pop("interval", None)  # evaluate every second here
        (tmp / path.name).write_text(yaml.safe_dump(doc))
        rules.append(str(tmp / path.name))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rules,
        "scrape_configs": [
            {
                "job_name": "graywire",
                # A cluster target label, as the dashboards' cluster variable expects one.
                "static_configs": [{"targets": [f"127.0.0.1:{gw_port}"], "labels": {"cluster": "test"}}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    with open(tmp / "prometheus.log", "w") as log, serve_app(create_app(settings), gw_port):
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        base = f"http://127.0.0.1:{prom_port}"
        try:
            wait_ready(base, proc, tmp / "prometheus.log")
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def wait_ready(base: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Until Prometheus answers /-/ready (it serves 503 while it starts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/-/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus not ready after {timeout:g} s: {log.read_text()[-2000:]}")


def query(base: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def wait_for(base: str, expr: str, timeout: float = 90.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = query(base, expr)
        except httpx.TransportError:
            result = []
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def dashboard_queries(deploy_dir: Path) -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((deploy_dir / "grafana" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        for p in dash["panels"]:
            for t in p.get("targets", []):
                out.append((dash["uid"], p["title"], t["expr"]))
    return out


def dashboard_variables(deploy_dir: Path) -> list[tuple[str, str, str]]:
    """(dashboard uid, variable, its query) of every query variable."""
    out = []
    for path in sorted((deploy_dir / "grafana" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                out.append((dash["uid"], v["name"], v["query"]["query"]))
    return out


def dashboard_annotations(deploy_dir: Path) -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((deploy_dir / "grafana" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        out.extend((dash["uid"], a["name"], a["expr"]) for a in dash["annotations"]["list"])
    return out


def substitute(expr: str) -> str:
    for var, value in (
        ("$__rate_interval", "15s"),
        ("$cluster", "test"),
        ("$job", "graywire"),
        ("$leaf", ".*"),
        ("$rail", ".*"),
        ("$node", "gpu-0002"),
        ("$port", ".*"),
    ):
        expr = expr.replace(var, value)
    return expr


def test_prometheus_scrapes_graywire_and_records_the_rules(prom: str) -> None:
    up = wait_for(prom, 'up{job="graywire"} == 1')
    assert up, "Prometheus never scraped graywire successfully"
    crit = wait_for(prom, 'leaf:graywire_leaf_ports_unhealthy:ratio{leaf="leaf-r5-000"} > 0')
    assert crit and 0 < float(crit[0]["value"][1]) < 0.25  # one link of 32 ports: no leaf alert
    assert wait_for(prom, 'kind_severity:graywire_incidents_open:sum{kind="speed_downgrade"}')


def test_every_dashboard_query_runs_and_has_data(prom: str, deploy_dir: Path) -> None:
    # Ready once the downgrade is an incident and rate() has two samples to work with.
    assert wait_for(prom, 'graywire_port_health{port="gpu-0002/mlx5_5"} == 2')
    assert wait_for(prom, "rate(graywire_pipeline_stage_seconds_total[15s]) > 0")
    empty = []
    for uid, title, expr in dashboard_queries(deploy_dir):
        if not wait_for(prom, substitute(expr), timeout=20):
            empty.append((uid, title, expr))
    assert not empty


def test_dashboard_variables_list_what_the_panels_select(prom: str, deploy_dir: Path) -> None:
    """Each variable query, as Grafana asks it (the series API), names the values used above."""
    expected = {"cluster": "test", "job": "graywire", "leaf": "leaf-r5-000", "rail": "5", "node": "gpu-0002"}
    assert wait_for(prom, 'graywire_port_health{port="gpu-0002/mlx5_5"} == 2')
    for uid, name, q in dashboard_variables(deploy_dir):
        m = re.fullmatch(r"label_values\((?P<sel>.*), (?P<label>\w+)\)", q)
        assert m, (uid, name, q)
        r = httpx.get(f"{prom}/api/v1/series", params={"match[]": substitute(m["sel"])}, timeout=10)
        body = r.json()
        assert body["status"] == "success", (uid, name, body)
        values = {s.get(m["label"]) for s in body["data"]}
        if name in expected:
            assert expected[name] in values, (uid, name, sorted(v for v in values if v)[:10])
        else:
            assert values - {None}, (uid, name)


def test_annotation_queries_run_and_mark_the_open_incidents(prom: str, deploy_dir: Path) -> None:
    assert wait_for(prom, 'graywire_port_health{port="gpu-0002/mlx5_5"} == 2')
    for uid, name, expr in dashboard_annotations(deploy_dir):
        result = query(prom, substitute(expr))  # valid PromQL in every case
        if name == "Alerts":
            continue  # no alert rule fires on this fabric; the query must only be valid
        if uid == "graywire-nccl-job":
            result = wait_for(prom, substitute(expr))
        assert result, (uid, name, expr)
        if uid == "graywire-port-detail":
            assert {r["metric"]["port"] for r in result} == {"gpu-0002/mlx5_5"}


def test_rate_works_on_the_raw_counters(prom: str) -> None:
    """The issue's test: Prometheus's own rate() over graywire's cumulative port counters."""
    result = wait_for(prom, "rate(graywire_port_receive_bytes_total[1m])")
    assert result, "no rate over graywire_port_receive_bytes_total"
    ports = {r["metric"]["port"] for r in result}
    assert len(ports) >= 8 * 32 // 2  # a host's ports and the leaf ports facing them, at least
    live = [float(r["value"][1]) for r in result if r["metric"]["port"].startswith("gpu-")]
    assert live and all(v > 0 for v in live)
    # It agrees with graywire's own per-poll figure over the same stretch (same traffic, two ways),
    # once the window is full: over a series younger than its window, rate() underestimates.
    port = 'port="gpu-0001/mlx5_0"'
    assert wait_for(prom, f"count_over_time(graywire_port_receive_bytes_total{{{port}}}[20s]) >= 15")
    ratio = query(
        prom,
        f"rate(graywire_port_receive_bytes_total{{{port}}}[15s])"
        f" / on (port) avg_over_time(graywire_port_receive_bytes_per_second{{{port}}}[15s])",
    )
    assert ratio and 0.5 < float(ratio[0]["value"][1]) < 2.0, ratio
