"""The sync step: incidents in the database become trigger, refresh and resolve messages."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from service.alerts.models import AlertState, OutboxMessage
from service.alerts.sync import SyncTarget, sync_alerts
from service.store import IncidentStore
from tests.service.alerts.conftest import T0, finding

PD = SyncTarget("pd", "warning")
AM = SyncTarget("am", "warning", refresh_s=60)


def messages(engine: Engine, receiver: str | None = None) -> list[tuple[str, int, str, str]]:
    """(receiver, incident id, action, event status) in outbox order."""
    query = sa.select(OutboxMessage).order_by(OutboxMessage.id)
    if receiver is not None:
        query = query.where(OutboxMessage.receiver == receiver)
    with Session(engine) as session:
        return [(m.receiver, m.incident_id, m.action, m.event["status"]) for m in session.scalars(query)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_open_then_resolve_enqueues_one_trigger_and_one_resolve(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    assert sync_alerts(engine, [PD], at(1)).triggered == 1
    assert sync_alerts(engine, [PD], at(2)).triggered == 0  # nothing new: nothing enqueued
    store.apply([finding(t=10), finding(status="cleared", t=20)])
    assert sync_alerts(engine, [PD], at(21)).resolved == 1
    sync_alerts(engine, [PD], at(22))
    assert messages(engine) == [("pd", 1, "trigger", "firing"), ("pd", 1, "resolve", "resolved")]


def test_each_receiver_gets_its_own_messages_and_severity_floor(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(entity="a", severity="info"), finding(entity="b", severity="critical")])
    sync_alerts(engine, [PD, SyncTarget("all", "info")], at(1))
    assert messages(engine, "pd") == [("pd", 2, "trigger", "firing")]
    assert [m[1] for m in messages(engine, "all")] == [1, 2]


def test_resolve_that_happened_before_the_first_sync_is_not_paged(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0), finding(status="cleared", t=5)])
    sync_alerts(engine, [PD], at(6))
    assert messages(engine) == []


def test_reopen_between_syncs_resolves_then_triggers_under_the_same_incident(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    store.apply([finding(status="cleared", t=5), finding(t=8)])  # both before the next sync
    sync_alerts(engine, [PD], at(9))
    assert messages(engine) == [
        ("pd", 1, "trigger", "firing"),
        ("pd", 1, "resolve", "resolved"),
        ("pd", 1, "trigger", "firing"),
    ]
    with Session(engine) as session:
        state = session.get(AlertState, (1, "pd"))
        assert state is not None and state.state == "firing" and state.episode == 1


def test_alertmanager_refreshes_firing_alerts_without_piling_up(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [AM], at(0))
    assert sync_alerts(engine, [AM], at(59)).refreshed == 0
    # The trigger is still pending (Alertmanager down): no refresh is stacked behind it.
    assert sync_alerts(engine, [AM], at(60)).refreshed == 0
    with Session(engine) as session, session.begin():
        session.execute(sa.update(OutboxMessage).values(status="delivered", delivered_at=at(61)))
    assert sync_alerts(engine, [AM], at(61)).refreshed == 1
    assert sync_alerts(engine, [AM], at(62)).refreshed == 0
    assert [m[2] for m in messages(engine)] == ["trigger", "refresh"]


def test_escalation_relabels_for_alertmanager_and_repages_others(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0, severity="warning")])
    sync_alerts(engine, [AM, PD], at(1))
    store.apply([finding(t=10, severity="critical")])
    sync_alerts(engine, [AM, PD], at(11))
    with Session(engine) as session:
        rows = list(session.scalars(sa.select(OutboxMessage).order_by(OutboxMessage.id)))
    am = [(m.action, m.event["severity"]) for m in rows if m.receiver == "am"]
    pd = [(m.action, m.event["severity"]) for m in rows if m.receiver == "pd"]
    # Alertmanager knows alerts by label set: the warning one is ended, the critical one posted.
    assert am == [("trigger", "warning"), ("resolve", "warning"), ("trigger", "critical")]
    assert pd == [("trigger", "warning"), ("trigger", "critical")]


def test_acknowledged_incident_keeps_firing(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    with Session(engine) as session, session.begin():
        session.execute(sa.text("UPDATE incidents SET status = 'acknowledged'"))
    assert sync_alerts(engine, [PD], at(2)).resolved == 0


def test_delivered_messages_are_pruned_after_retention(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    with Session(engine) as session, session.begin():
        session.execute(sa.update(OutboxMessage).values(status="delivered", delivered_at=at(1)))
    assert sync_alerts(engine, [PD], at(100), retention_s=3600).pruned == 0
    assert sync_alerts(engine, [PD], at(3602), retention_s=3600).pruned == 1
