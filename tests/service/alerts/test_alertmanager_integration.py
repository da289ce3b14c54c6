"""Against a real Alertmanager: alerts posted through the outbox arrive, refresh and resolve.

The test starts Debian's ``prometheus-alertmanager`` on free ports with a throwaway config
whose webhook points back at a local recorder, so the same run also checks graywire's own
webhook payload against the one Alertmanager itself sends.
"""

from __future__ import annotations

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.service.alert_settings import AlertsSettings
from graywire.service.alerts.alertmanager import fingerprint
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.alerts.events import AlertEvent
from graywire.service.alerts.webhook import payload
from graywire.service.models import AlertState
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import finding
from tests.service.alerts.receiver import Recorder
from tests.service.alerts.test_dispatcher import cycle_until


def last_sent(engine: Engine) -> AlertEvent:
    """The event graywire last enqueued for the only incident of the test."""
    with Session(engine) as session:
        return AlertEvent.from_dict(session.scalars(sa.select(AlertState)).one().event)


def _graywire_alerts(am: str) -> list[dict]:
    alerts = httpx.get(f"{am}/api/v2/alerts", timeout=5).json()
    return [a for a in alerts if a["labels"].get("alertname", "").startswith("Graywire")]


def test_incident_fires_refreshes_and_resolves_in_alertmanager(
    alertmanager_url: str, sqlite_engine: Engine, recorder: Recorder
) -> None:
    store = IncidentStore(sqlite_engine)
    settings = AlertsSettings(
        external_url="https://graywire.example.com",
        alertmanager={"urls": [alertmanager_url], "refresh_interval": "1s"},
        retry={"initial_backoff": "0.1s", "max_backoff": "1s"},
    )
    dispatcher = Dispatcher(sqlite_engine, settings)
    store.apply([finding(t=0)])
    cycle_until(dispatcher, lambda: len(_graywire_alerts(alertmanager_url)) == 1)

    (alert,) = _graywire_alerts(alertmanager_url)
    labels = alert["labels"]
    assert labels == {
        "alertname": "GraywireSpeedDowngrade",
        "severity": "critical",
        "kind": "speed_downgrade",
        "entity": "gpu-0002/mlx5_5",
        "incident_id": "1",
        "node": "gpu-0002",
        "port": "gpu-0002/mlx5_5",
        "instance": "graywire.example.com",  # the external URL's host, alerts.instance unset
    }
    assert alert["annotations"]["runbook_url"] == "docs/runbooks/speed_downgrade.md"
    assert alert["status"]["state"] == "active"
    assert alert["annotations"]["summary"] == "speed_downgrade on gpu-0002/mlx5_5: 400G, expected 800G"
    assert alert["generatorURL"] == "https://graywire.example.com/api/v1/incidents/1"
    assert alert["startsAt"].startswith("2025-03-01T12:00:00")
    assert alert["fingerprint"] == fingerprint(labels)
    assert alert["receivers"] == [{"name": "recorder"}]

    # Refreshed while firing: a later post moves endsAt forward (refresh interval 1 s here).
    first_end = alert["endsAt"]
    cycle_until(dispatcher, lambda: _graywire_alerts(alertmanager_url)[0]["endsAt"] > first_end)

    # Alertmanager's own webhook for it has exactly the fields graywire's webhooks send.
    recorder.wait_for(lambda: recorder.delivered("/am-webhook"), timeout=15)
    theirs = recorder.delivered("/am-webhook")[0].json()
    ours = payload(last_sent(sqlite_engine), "recorder", "https://graywire.example.com")
    assert theirs["version"] == ours["version"] == "4"
    assert set(theirs) == set(ours)
    assert set(theirs["alerts"][0]) == set(ours["alerts"][0])
    assert theirs["status"] == "firing"
    assert theirs["alerts"][0]["fingerprint"] == ours["alerts"][0]["fingerprint"]
    assert theirs["groupLabels"] == ours["groupLabels"] == {"incident_id": "1"}
    assert theirs["commonLabels"] == ours["commonLabels"]

    # Resolved when the incident closes: gone from the active alerts, resolution notified.
    store.apply([finding(status="cleared", t=30)])
    cycle_until(dispatcher, lambda: _graywire_alerts(alertmanager_url) == [])
    recorder.wait_for(
        lambda: any(r.json()["status"] == "resolved" for r in recorder.delivered("/am-webhook")), timeout=15
    )
    resolved = next(r.json() for r in recorder.delivered("/am-webhook") if r.json()["status"] == "resolved")
    assert resolved["alerts"][0]["endsAt"].startswith("2025-03-01T12:00:30")
