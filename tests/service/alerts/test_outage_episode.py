"""An incident that opens and closes while PostgreSQL is away is still paged once it is back.

The service runs against a real PostgreSQL behind the cuttable relay of ``test_db_outage``,
with a PagerDuty and a webhook receiver on a local recorder and a real Alertmanager whose own
webhook points at the same recorder. fabricsim drives one fault before the outage (paged as
usual) and one that starts and ends while the relay is cut.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.app import create_app
from graywire.service.config import load_settings
from tests.relay import Relay
from tests.service.alerts.receiver import Recorder
from tests.service.alerts.test_dispatcher import FAST_RETRY, cycle_until

pytestmark = pytest.mark.alone  # real processes against wall-clock deadlines

RK = "R0UT1NGKEY0000000000000000000000"
# gpu-0001 rail 3 is down to 400G from 3 s on (open throughout); gpu-0002 rail 1 from 9 s to
# 13 s, which the 2 s polls see firing at 12 s and cleared at 16 s: inside the outage below.
# (Short polls keep the simulated clock, which runs ahead by a poll per tick, near real time.)
FAULTS = "speed_downgrade@3s+1h:gpu-0001/mlx5_3,speed_downgrade@9s+4s:gpu-0002/mlx5_1"
BEFORE_OUTAGE = 4  # polls at 0-6 s: the first fault fires
DURING_OUTAGE = 5  # polls at 8-16 s: the second fault fires and clears


def _pd(recorder: Recorder, key: str | None = None) -> list[dict[str, Any]]:
    events = [r.json() for r in recorder.delivered("/v2/enqueue")]
    return [e for e in events if key is None or e["dedup_key"] == key]


def _hooks(recorder: Recorder, prefix: str, incident_id: int) -> list[dict[str, Any]]:
    bodies = [r.json() for r in recorder.delivered(prefix)]
    return [b for b in bodies if b["groupLabels"].get("incident_id") == str(incident_id)]


@pytest.mark.postgres
def test_an_episode_inside_a_database_outage_is_paged_once_the_database_is_back(
    tmp_path: Path, relay: tuple[Relay, str], recorder: Recorder, alertmanager_url: str
) -> None:
    proxy, url = relay
    recorder.on("/v2/enqueue", ok_status=202, ok_body=b'{"status":"success"}')
    alerts = {
        "min_severity": "critical",
        "group_wait": "0s",
        "alertmanager": {"urls": [alertmanager_url], "refresh_interval": "1s"},
        "receivers": [
            {"name": "oncall", "type": "pagerduty", "url": f"{recorder.url}/v2/enqueue", "routing_key": RK},
            {"name": "noc", "type": "webhook", "url": f"{recorder.url}/hook"},
        ],
        "retry": FAST_RETRY,
    }
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=url,
        archive={"enabled": False},
        poll_interval="2s",
        drain={"max_fraction": 0.5},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": FAULTS}],
        alerts=alerts,
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        runner = c.app.state.runner  # type: ignore[attr-defined]
        dispatcher = Dispatcher(c.app.state.store.engine, settings.alerts)  # type: ignore[attr-defined]
        for _ in range(BEFORE_OUTAGE):
            runner.tick()
        (first,) = c.get("/api/v1/incidents").json()["items"]
        first_key = f"graywire-incident-{first['id']}"
        cycle_until(dispatcher, lambda: [e["event_action"] for e in _pd(recorder)] == ["trigger"])

        proxy.cut()
        during = [f for _ in range(DURING_OUTAGE) for f in runner.tick()]
        episode = [(f.status, f.time) for f in during if f.node == "gpu-0002" and f.kind == "speed_downgrade"]
        assert [status for status, _ in episode] == ["firing", "cleared"]  # all of it while cut
        fired_at, cleared_at = (t for _, t in episode)

        proxy.start()
        runner.tick()
        items = c.get("/api/v1/incidents", params={"node": "gpu-0002"}).json()["items"]
        (late,) = [i for i in items if i["kind"] == "speed_downgrade"]
        assert late["status"] == "resolved"
        key = f"graywire-incident-{late['id']}"
        stored = late["evidence"]["stored_late"]
        assert datetime.fromisoformat(stored["fired_at"]) == fired_at
        assert datetime.fromisoformat(stored["cleared_at"]) == cleared_at
        assert datetime.fromisoformat(stored["unstored_since"]) < datetime.fromisoformat(stored["stored_at"])

        def paged() -> bool:
            direct = len(_pd(recorder, key)) == len(_hooks(recorder, "/hook", late["id"])) == 2
            am = [b["status"] for b in _hooks(recorder, "/am-webhook", late["id"])]
            return direct and am == ["firing", "resolved"]

        cycle_until(dispatcher, paged, timeout=30)

    # PagerDuty: a trigger, then its resolve, under the incident's one key; no other key.
    trigger, resolve = _pd(recorder, key)
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert {e["dedup_key"] for e in _pd(recorder)} == {first_key, key}
    details = trigger["payload"]["custom_details"]
    assert details["incident_id"] == late["id"]
    assert details["stored_late"]["fired_at"] == stored["fired_at"]
    assert details["stored_late"]["cleared_at"] == stored["cleared_at"]
    assert "stored late" in trigger["payload"]["summary"]
    assert datetime.fromisoformat(trigger["payload"]["timestamp"].replace("Z", "+00:00")) == fired_at

    # The webhook: firing, then resolved at the time it really cleared.
    firing, resolved = _hooks(recorder, "/hook", late["id"])
    assert (firing["status"], resolved["status"]) == ("firing", "resolved")
    assert "stored_late" in firing["commonAnnotations"]
    ends = resolved["alerts"][0]["endsAt"].replace("Z", "+00:00")
    assert datetime.fromisoformat(ends) == cleared_at

    # Alertmanager notified it (it drops an alert that first arrives already resolved): firing
    # from when it fired, then resolved once its endsAt passed.
    am_firing, am_resolved = _hooks(recorder, "/am-webhook", late["id"])
    starts = am_firing["alerts"][0]["startsAt"].replace("Z", "+00:00")
    assert datetime.fromisoformat(starts) == fired_at
    assert "stored_late" in am_firing["commonAnnotations"]
    assert am_resolved["status"] == "resolved"
