"""Shared helpers for the alerting tests: incidents from findings, a recording HTTP server, and a
real Alertmanager (Debian's ``prometheus-alertmanager``) whose webhook points at that server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import Engine

from graywire.detectors.findings import Finding
from graywire.service.models.engine import make_engine, upgrade
from tests.conftest import _in_ci
from tests.service.alerts.receiver import Recorder, serve_recorder

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def finding(
    entity: str = "gpu-0002/mlx5_5",
    status: str = "firing",
    t: float = 0,
    *,
    kind: str = "speed_downgrade",
    severity: str = "critical",
    **kwargs: Any,
) -> Finding:
    values: dict[str, Any] = {
        "summary": f"{kind} on {entity}: 400G, expected 800G",
        "detector": "link/1.0",
        "node": "gpu-0002",
        "port": entity,
        "score": 1.0,
    }
    values.update(kwargs)
    return Finding(
        kind=kind, entity=entity, status=status, time=T0 + timedelta(seconds=t), severity=severity, **values
    )


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """SQLite only, for tests whose other half (a real Alertmanager) is the point."""
    url = f"sqlite:///{tmp_path / 'graywire.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with serve_recorder() as rec:
        yield rec


ALERTMANAGER = os.environ.get("GRAYWIRE_TEST_ALERTMANAGER", "/usr/bin/prometheus-alertmanager")
CONFIG = """\
route:
  receiver: recorder
  group_by: [incident_id]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: recorder
    webhook_configs:
      - url: {url}/am-webhook
        send_resolved: true
"""


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"Alertmanager integration test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_alertmanager(tmp_path: Path, config_text: str) -> Iterator[str]:
    """A real Alertmanager on a free port with ``config_text`` as its configuration; its URL."""
    binary = shutil.which(ALERTMANAGER) or (ALERTMANAGER if os.access(ALERTMANAGER, os.X_OK) else None)
    if binary is None:
        _unavailable(f"{ALERTMANAGER} not found (Debian package prometheus-alertmanager)")
    config = tmp_path / "alertmanager.yml"
    config.write_text(config_text)
    port = _free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                output = (tmp_path / "alertmanager.log").read_text()
                _unavailable(f"alertmanager exited with {proc.returncode}: {output}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                _unavailable("alertmanager did not become ready within 20 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def alertmanager_url(tmp_path: Path, recorder: Recorder) -> Iterator[str]:
    with running_alertmanager(tmp_path, CONFIG.format(url=recorder.url)) as url:
        yield url
