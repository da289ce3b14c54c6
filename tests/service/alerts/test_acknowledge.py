"""An operator's ack in graywire reaches PagerDuty as an ``acknowledge`` event, once an episode."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.alerts import outbox, pagerduty
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.alerts.sync import SyncTarget, sync_alerts
from graywire.service.drain_engine import DrainEngine
from graywire.service.drain_policy import DrainPolicy
from graywire.service.models import OutboxMessage
from graywire.service.operations import Operations
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import T0, finding
from tests.service.alerts.receiver import Recorder
from tests.service.alerts.test_dispatcher import cycle_until, settings
from tests.service.alerts.test_outbox import event
from tests.service.alerts.test_payloads import FIRING

PD = SyncTarget("pd", "warning", inhibit=True, acknowledge=True)
HOOK = SyncTarget("hook", "warning", inhibit=True)
AM = SyncTarget("am", "warning", refresh_s=60)
FABRIC = build_fabric(TopologySpec(hosts=8, gpus=8, hosts_per_leaf=8))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def operations(engine: Engine, store: IncidentStore) -> Operations:
    return Operations(DrainEngine(engine, store, FABRIC, DrainPolicy(), clock=lambda: at(5)))


def story(engine: Engine, receiver: str) -> list[tuple[int, str, str, bool]]:
    """(incident, action, event status, acknowledged) in outbox order."""
    query = sa.select(OutboxMessage).where(OutboxMessage.receiver == receiver).order_by(OutboxMessage.id)
    with Session(engine) as session:
        return [
            (m.incident_id, m.action, m.event["status"], m.event.get("acknowledged", False))
            for m in session.scalars(query)
        ]


def test_an_ack_is_passed_on_once_to_pagerduty_only(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(severity="warning", t=0)])
    sync_alerts(engine, [PD, HOOK, AM], at(1))
    operations(engine, store).acknowledge(1, "alice", "reseating the cable")
    for t in (6, 7, 70, 200):  # many syncs: one acknowledgement
        sync_alerts(engine, [PD, HOOK, AM], at(t))
    assert story(engine, "pd") == [(1, "trigger", "firing", False), (1, "refresh", "firing", True)]
    assert story(engine, "hook") == [(1, "trigger", "firing", False)]  # no ack in a v4 webhook
    assert story(engine, "am") == [(1, "trigger", "firing", False)]  # (still pending: no refresh yet)
    # Escalating after the ack pages under the same key (PagerDuty keeps it acknowledged), and
    # the resolve closes it; neither sends the acknowledgement again.
    store.apply([finding(severity="critical", t=210)])
    sync_alerts(engine, [PD], at(211))
    store.apply([finding(status="cleared", t=220)])
    sync_alerts(engine, [PD], at(221))
    sync_alerts(engine, [PD], at(222))
    assert story(engine, "pd")[2:] == [(1, "trigger", "firing", True), (1, "resolve", "resolved", True)]


def test_an_incident_acknowledged_before_its_first_page_is_paged_then_acknowledged(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0)])
    operations(engine, store).acknowledge(1, "alice")
    sync_alerts(engine, [PD], at(1))
    sync_alerts(engine, [PD], at(2))
    assert story(engine, "pd") == [(1, "trigger", "firing", True), (1, "refresh", "firing", True)]


def test_a_reopened_incident_is_a_new_episode_with_its_own_ack(store: IncidentStore, engine: Engine) -> None:
    ops = operations(engine, store)
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    ops.acknowledge(1, "alice")
    sync_alerts(engine, [PD], at(2))
    store.apply([finding(status="cleared", t=10)])
    sync_alerts(engine, [PD], at(11))
    store.apply([finding(t=20)])  # back: open again, not acknowledged
    sync_alerts(engine, [PD], at(21))
    sync_alerts(engine, [PD], at(22))
    assert [m[1] for m in story(engine, "pd")] == ["trigger", "refresh", "resolve", "trigger"]
    ops.acknowledge(1, "bob")
    sync_alerts(engine, [PD], at(30))
    assert story(engine, "pd")[-1] == (1, "refresh", "firing", True)


def test_pagerduty_receives_trigger_acknowledge_and_resolve_under_one_key(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    recorder.on("/v2/enqueue", ok_status=202, ok_body=b'{"status":"success","message":"Event processed"}')
    rk = "R0UT1NGKEY0000000000000000000000"
    dispatcher = Dispatcher(
        engine,
        settings(recorder, {"name": "pd", "type": "pagerduty", "url": "/v2/enqueue", "routing_key": rk},
                 {"name": "noc", "type": "webhook", "url": "/hook"}),
    )  # fmt: skip
    store.apply([finding(t=0)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/v2/enqueue")) == 1)
    operations(engine, store).acknowledge(1, "alice")
    cycle_until(dispatcher, lambda: len(recorder.delivered("/v2/enqueue")) == 2)
    store.apply([finding(status="cleared", t=30)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/v2/enqueue")) == 3)
    cycle_until(dispatcher, lambda: len(recorder.delivered("/hook")) == 2)
    trigger, ack, resolve = (r.json() for r in recorder.delivered("/v2/enqueue"))
    assert trigger["event_action"] == "trigger" and trigger["payload"]["severity"] == "critical"
    # Events API v2: acknowledge and resolve carry the routing key, the action and the key only.
    assert ack == {"routing_key": rk, "event_action": "acknowledge", "dedup_key": "graywire-incident-1"}
    assert resolve == {"routing_key": rk, "event_action": "resolve", "dedup_key": "graywire-incident-1"}
    assert trigger["dedup_key"] == "graywire-incident-1"
    assert [r.json()["status"] for r in recorder.delivered("/hook")] == ["firing", "resolved"]


def test_over_the_outbox_limit_an_acknowledgement_goes_before_any_page(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        trigger = outbox.enqueue(session, "pd", "trigger", event(1), T0)
        acked = dataclasses.replace(event(1), acknowledged=True)
        ack = outbox.enqueue(session, "pd", "refresh", acked, T0)
        other = outbox.enqueue(session, "pd", "trigger", event(2), T0)
        session.flush()
        ids = [trigger.id, ack.id, other.id]
    with Session(engine) as session, session.begin():
        # The page it follows is not "superseded" by it: dropping that would lose the page.
        assert outbox.enforce_limit(session, "pd", 2, T0) == {("superseded", "warning"): 1}
    with Session(engine) as session:
        left = set(session.scalars(sa.select(OutboxMessage.id)))
    assert left == {ids[0], ids[2]}


def test_the_pagerduty_action_follows_the_outbox_message() -> None:
    acked = dataclasses.replace(FIRING, acknowledged=True)
    assert pagerduty.event_action(acked, "refresh") == "acknowledge"
    assert pagerduty.event_action(acked, "trigger") == "trigger"  # an escalation after the ack
    assert pagerduty.event_action(dataclasses.replace(acked, status="resolved"), "resolve") == "resolve"
    assert pagerduty.event_action(FIRING, "refresh") == "trigger"  # not acknowledged: the page itself
