"""kill -9 at any moment loses no incident, decision or audit row, and never drains twice.

Runs the real ``graywire serve`` as a subprocess on a fabricsim source, kills it with SIGKILL
(once after a drain was decided, once during the restart's first polls) and checks what the
next process finds in the database and serves.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = pytest.mark.alone  # real processes against wall-clock deadlines

FAULTS = "speed_downgrade@2s+1h:gpu-0001/mlx5_3"
GRAYWIRE = Path(sys.executable).parent / "graywire"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    def __init__(self, config: Path, port: int, log: Path) -> None:
        self.config, self.base, self.log = config, f"http://127.0.0.1:{port}", log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(GRAYWIRE), "serve", "--config", str(self.config)], stdout=out, stderr=subprocess.STDOUT
            )
        self.wait_for(lambda: self.get("/healthz").status_code == 200, "the service to answer")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.base + path, params=params, timeout=5)

    def polls(self) -> int:
        return int(self.get("/healthz").json()["polls"])

    def wait_for(self, ok: Callable[[], bool], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(
                    f"graywire serve exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}"
                )
            try:
                if ok():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def service(tmp_path: Path, db_url: str) -> Iterator[Service]:
    port = free_port()
    config = tmp_path / "graywire.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "port": port,
                "data_dir": str(tmp_path / "data"),
                "database_url": db_url,
                "poll_interval": "1s",
                "archive": {"enabled": False},
                "sources": [{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": FAULTS}],
            }
        )
    )
    svc = Service(config, port, tmp_path / "serve.log")
    try:
        yield svc
    finally:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()


def snapshot(svc: Service) -> dict[str, Any]:
    return {
        "incidents": svc.get("/api/v1/incidents", limit=1000).json()["items"],
        "drain": svc.get("/api/v1/drain").json(),
        "audit": svc.get("/api/v1/audit", limit=1000).json()["items"],
    }


def test_kill_9_loses_nothing_and_does_not_drain_again(service: Service) -> None:
    service.start()
    service.wait_for(
        lambda: any(i["action"] == "drain" for i in service.get("/api/v1/drain").json()), "a drain"
    )
    before = snapshot(service)
    assert [(d["node"], d["action"]) for d in before["drain"]] == [("gpu-0001", "drain")]
    service.kill9()

    service.start()  # killed again while its first polls run (the fault re-fires at +2 s)
    time.sleep(1.5)
    service.kill9()

    service.start()
    start = service.polls()
    service.wait_for(lambda: service.polls() >= start + 5, "five more polls")
    after = snapshot(service)

    ids_after = {i["id"]: i for i in after["incidents"]}
    for inc in before["incidents"]:
        assert inc["id"] in ids_after, f"incident {inc['id']} lost"
        assert ids_after[inc["id"]]["opened_at"] == inc["opened_at"]
    # The re-fired fault rolled into the same incident, not a new one.
    keys = [(i["kind"], i["entity"]) for i in after["incidents"]]
    assert len(keys) == len(set(keys))
    assert [(d["node"], d["action"], d["since"]) for d in after["drain"]] == [
        (d["node"], d["action"], d["since"]) for d in before["drain"]
    ]
    audit_after = {a["id"]: a for a in after["audit"]}
    for row in before["audit"]:
        assert audit_after.get(row["id"]) == row, f"audit row {row['id']} lost or changed"
    drains = [a for a in after["audit"] if a["action"] == "drain"]
    assert [a["node"] for a in drains] == ["gpu-0001"]  # decided once, across three processes
    assert service.get("/api/v1/drain/state").json()["circuit_breaker"]["recent_drains"] == 1


@pytest.mark.parametrize("stop", ["kill -9", "clean stop"])
def test_a_fault_repaired_while_killed_resolves_after_the_restart(
    tmp_path: Path, db_url: str, stop: str
) -> None:
    """The process dies (or stops) with the fault's incident open and its host drained; the
    link is repaired meanwhile. The restarted process closes the incident on its first healthy
    polls (tests/service/test_restart.py has the rest of the story, the return to service)."""
    port = free_port()

    def config(faults: str) -> Path:
        path = tmp_path / f"graywire-{'faulty' if faults else 'repaired'}.yaml"
        path.write_text(yaml.safe_dump({
            "port": port, "data_dir": str(tmp_path / "data"), "database_url": db_url, "poll_interval": "1s",
            "archive": {"enabled": False}, "drain": {"shadow": False},
            "sources": [{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": faults}],
        }))  # fmt: skip
        return path

    first = Service(config(FAULTS), port, tmp_path / "first.log")
    first.start()
    first.wait_for(lambda: [d["node"] for d in first.get("/api/v1/drain").json()] == ["gpu-0001"], "a drain")
    (incident,) = [
        i for i in first.get("/api/v1/incidents").json()["items"] if i["kind"] == "speed_downgrade"
    ]
    if stop == "kill -9":
        first.kill9()
    else:
        assert first.proc is not None
        first.proc.send_signal(signal.SIGTERM)
        first.proc.wait(timeout=30)
    second = Service(config(""), port, tmp_path / "second.log")
    second.start()
    try:
        second.wait_for(
            lambda: second.get(f"/api/v1/incidents/{incident['id']}").json()["status"] == "resolved",
            "the repaired link's incident to resolve",
        )
    finally:
        second.kill9()
