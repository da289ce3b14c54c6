"""Helpers shared by the metrics and deploy tests: a real scrape of the app, and promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings

PROMTOOL = "promtool"
#: A downgraded NIC (a critical incident on both ends of its link) and a slower NCCL channel.
FAULTS = "speed_downgrade@15s+300s:gpu-0002/mlx5_5,slow_channel@5s+300s=0.3"
#: Alerting on, towards a port nothing listens on: the outbox metrics are exported (and grow).
ALERTS = {"alertmanager": {"urls": ["http://127.0.0.1:9/"]}}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def promtool() -> str:
    """Path to promtool (Debian package ``prometheus``); skip locally, fail under CI when absent."""
    found = shutil.which(PROMTOOL) or (
        "/usr/bin/promtool" if os.access("/usr/bin/promtool", os.X_OK) else None
    )
    if found:
        return found
    reason = "promtool not found (apt-get install prometheus)"
    if in_ci():
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


def run_promtool(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool(), *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd
    )


def scrape(data_dir: Path, *, per_port: bool = True, polls: int = 4, hosts: int = 8) -> str:
    """``GET /metrics`` of the service over the built-in fabricsim source after a few polls."""
    settings = load_settings(
        None,
        data_dir=data_dir,
        poll_interval="10s",
        sources=[{"type": "fabricsim", "hosts": hosts, "seed": 3, "faults": FAULTS}],
        metrics={"per_port": per_port},
        alerts=ALERTS,
    )
    app = create_app(settings, run_loop=False)
    with TestClient(app) as client:
        for _ in range(polls):
            app.state.runner.tick()
        r = client.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        return r.text


def exported_names(text: str) -> set[str]:
    """Every series name an exposition can carry: each family's name, with ``_total`` on counters."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}{s}" for s in ("_bucket", "_sum", "_count"))
            elif kind == "summary":
                names.update(f"{name}{s}" for s in ("_sum", "_count"))
    return names
