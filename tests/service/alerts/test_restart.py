"""Nothing lost across a crash: ``graywire serve`` is killed (SIGKILL) while a page is in flight.

The service runs on fabricsim with injected link faults and two receivers on a real local HTTP
server: a slow PagerDuty endpoint (each request held for a second) and a generic webhook that
fails at first. The process is killed while a PagerDuty request is in flight, then started
again on the same database. Delivery is at-least-once: the interrupted request is sent again
after restart, under the same dedup key, and every incident ends with its receivers told its
final state, each incident under exactly one key.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from graywire.service.alerts.webhook import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from tests.service.alerts.receiver import Received, Recorder

pytestmark = pytest.mark.alone  # real processes against wall-clock deadlines

SECRET = "restart-test-secret"
FAULTS = "speed_downgrade@2s+4s:gpu-0002/mlx5_5,speed_downgrade@3s+1h:gpu-0005/mlx5_1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, recorder: Recorder, port: int) -> Path:
    config = {
        "host": "127.0.0.1",
        "port": port,
        "data_dir": str(tmp_path / "data"),
        "poll_interval": "1s",
        "archive": {"enabled": False},
        "sources": [{"type": "fabricsim", "hosts": 8, "seed": 3, "faults": FAULTS}],
        "alerts": {
            "min_severity": "info",
            "sync_interval": "0.2s",
            "group_wait": "0s",  # every incident's story, short-lived ones too
            "retry": {"initial_backoff": "0.2s", "max_backoff": "1s"},
            "receivers": [
                {"name": "pd", "type": "pagerduty", "url": f"{recorder.url}/v2/enqueue",
                 "routing_key": "R0UT1NGKEY0000000000000000000000", "timeout": "2s"},
                {"name": "hook", "type": "webhook", "url": f"{recorder.url}/hook", "secret": SECRET,
                 "timeout": "2s"},
            ],
        },
    }  # fmt: skip
    path = tmp_path / "graywire.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start(config: Path, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "graywire.service.cli", "serve", "--config", str(config)],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait(predicate: Any, timeout: float, what: str, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"graywire exited with {p.returncode} while waiting for {what}"
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _collapse(actions: list[str]) -> list[str]:
    """Drop immediate repeats: redeliveries of one event under at-least-once delivery."""
    return [a for i, a in enumerate(actions) if i == 0 or a != actions[i - 1]]


def _in_flight(recorder: Recorder, prefix: str) -> int:
    with recorder.lock:
        return sum(p.startswith(prefix) for p in recorder.started) - len(
            [r for r in recorder.received if r.path.startswith(prefix)]
        )


@pytest.mark.slow
def test_kill_mid_delivery_loses_nothing_and_pages_each_incident_under_one_key(
    tmp_path: Path, recorder: Recorder
) -> None:
    recorder.on("/v2/enqueue", delay_s=1.0, ok_status=202, ok_body=b'{"status":"success"}')
    recorder.on("/hook", statuses=[500, 500, 503])
    config = _config(tmp_path, recorder, _free_port())

    first = _start(config, tmp_path, "first")
    try:
        _wait(lambda: _in_flight(recorder, "/v2/enqueue") > 0, 60, "a PagerDuty request in flight", [first])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    time.sleep(1.2)  # let the held request finish: the receiver got it, the sender never heard
    before_restart = recorder.all("")
    interrupted_id = recorder.all("/v2/enqueue")[-1].headers[DELIVERY_HEADER]

    second = _start(config, tmp_path, "second")
    try:
        snapshot: dict[str, Any] = {}

        def settled() -> bool:
            """Both faults seen, every incident synced and its messages delivered, read in one
            transaction; the receiver's log is copied at that moment (the service goes on)."""
            with sqlite3.connect(tmp_path / "data" / "graywire.db", timeout=10) as conn:
                conn.execute("BEGIN")

                def q(sql: str) -> list[Any]:
                    return conn.execute(sql).fetchall()

                link = sorted(s for (s,) in q("SELECT status FROM incidents WHERE kind = 'speed_downgrade'"))
                if link != ["open", "resolved"]:
                    return False
                pending = q("SELECT count(*) FROM alert_outbox WHERE status != 'delivered'")[0][0]
                # No receiver believes a resolved incident firing, or was not told of an open one.
                # Effects of an active cause (a slow rank behind a downgraded link) fold under
                # it and are paged to nobody (had they been, they would be told of as usual); they
                # are left out of every story below.
                paged = (
                    "NOT (i.caused_by IS NOT NULL"
                    " AND NOT EXISTS (SELECT 1 FROM alert_state s WHERE s.incident_id = i.id))"
                )
                unsynced = q(
                    f"SELECT count(*) FROM incidents i WHERE {paged} AND (SELECT count(*) FROM alert_state s"
                    " WHERE s.incident_id = i.id AND s.state = 'firing')"
                    " != CASE WHEN i.status = 'resolved' THEN 0 ELSE 2 END"
                )[0][0]
                if pending or unsynced:
                    return False
                snapshot["incidents"] = dict(q(f"SELECT id, status FROM incidents i WHERE {paged}"))
            snapshot["pd"] = [r.json() for r in recorder.delivered("/v2/enqueue")]
            snapshot["hooks"] = recorder.delivered("/hook")
            return True

        _wait(settled, 90, "both faults' incidents, all synced and delivered", [second])
    finally:
        second.terminate()
        try:
            second.wait(timeout=20)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()

    # The request cut off by the kill went out again after the restart, as the same message.
    after_restart = recorder.all("")[len(before_restart) :]
    assert interrupted_id in {r.headers[DELIVERY_HEADER] for r in after_restart if r.path == "/v2/enqueue"}

    incidents: dict[int, str] = snapshot["incidents"]
    pd: list[dict[str, Any]] = snapshot["pd"]
    hooks: list[Received] = snapshot["hooks"]
    for r in hooks:
        assert verify(SECRET, r.body, r.headers.get(SIGNATURE_HEADER)), "webhook signature does not verify"

    # One key per incident: a trigger's key always names the incident it describes.
    for event in pd:
        if event["event_action"] == "trigger":
            assert (
                event["dedup_key"] == f"graywire-incident-{event['payload']['custom_details']['incident_id']}"
            )
    assert {e["dedup_key"] for e in pd} == {f"graywire-incident-{i}" for i in incidents}
    assert all(r.json()["groupLabels"]["incident_id"] in {str(i) for i in incidents} for r in hooks)

    # Every incident's story arrives in order, ending in its current state, on both receivers.
    for incident_id, status in incidents.items():
        final = "resolve" if status == "resolved" else "trigger"
        key = f"graywire-incident-{incident_id}"
        pd_story = _collapse([e["event_action"] for e in pd if e["dedup_key"] == key])
        hook_story = _collapse(_hook_actions(hooks, incident_id))
        for story in (pd_story, hook_story):
            assert story[0] == "trigger" and story[-1] == final, (incident_id, status, story)
        assert pd_story == hook_story
    log = (tmp_path / "second.log").read_text()
    assert "Traceback" not in log, log


def _hook_actions(hooks: list[Received], incident_id: int) -> list[str]:
    out = []
    for r in hooks:
        body = r.json()
        if body["groupLabels"]["incident_id"] == str(incident_id):
            out.append("trigger" if body["status"] == "firing" else "resolve")
    return out
