"""The dispatcher against a real local HTTP server: signatures, retries, ordering, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.service.alert_settings import AlertsSettings
from graywire.service.alerts import outbox
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.alerts.webhook import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from graywire.service.metrics.alerts import AlertsExporter
from graywire.service.models import OutboxMessage
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import T0, finding
from tests.service.alerts.receiver import Recorder

FAST_RETRY = {"initial_backoff": "0.05s", "max_backoff": "0.2s", "jitter": 0.0}


def settings(recorder: Recorder, *receivers: dict[str, Any]) -> AlertsSettings:
    return AlertsSettings(
        external_url="https://graywire.example.com",
        min_severity="info",
        receivers=[{**r, "url": recorder.url + r["url"]} for r in receivers],
        retry=FAST_RETRY,
    )


def cycle_until(dispatcher: Dispatcher, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run sync + delivery cycles (as the service loop does) until ``done``."""

    async def go() -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "timed out waiting for delivery"
            await asyncio.to_thread(dispatcher.sync)
            await dispatcher.deliver_due()
            await asyncio.sleep(0.02)
        await dispatcher.aclose()

    asyncio.run(go())


def test_webhook_is_signed_and_carries_the_v4_payload(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    dispatcher = Dispatcher(engine, settings(recorder, {"name": "noc", "type": "webhook", "url": "/hook",
                                                        "secret": "s3cret"}))  # fmt: skip
    store.apply([finding(t=0)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/hook")) == 1)
    store.apply([finding(status="cleared", t=30)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/hook")) == 2)
    first, second = recorder.delivered("/hook")
    for r in (first, second):
        assert verify("s3cret", r.body, r.headers[SIGNATURE_HEADER])
        assert r.headers["Content-Type"] == "application/json"
    assert [r.json()["status"] for r in (first, second)] == ["firing", "resolved"]
    assert first.json()["version"] == "4" and first.json()["receiver"] == "noc"
    assert first.json()["alerts"][0]["labels"]["alertname"] == "GraywireSpeedDowngrade"
    assert int(first.headers[DELIVERY_HEADER]) < int(second.headers[DELIVERY_HEADER])


def test_failing_receiver_retries_in_order_and_does_not_block_the_others(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    recorder.on("/flaky", statuses=[503, 503, 429])
    dispatcher = Dispatcher(
        engine,
        settings(recorder, {"name": "flaky", "type": "webhook", "url": "/flaky"},
                 {"name": "steady", "type": "webhook", "url": "/steady"}),
    )  # fmt: skip
    store.apply([finding(entity="p1", t=0), finding(entity="p2", t=1)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/steady")) == 2)
    assert recorder.delivered("/flaky") == []  # still backing off
    store.apply([finding(entity="p1", status="cleared", t=5)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/flaky")) == 3)

    def story(prefix: str) -> list[tuple[str, str]]:
        return [(r.json()["commonLabels"]["entity"], r.json()["status"]) for r in recorder.delivered(prefix)]

    expected = [("p1", "firing"), ("p2", "firing"), ("p1", "resolved")]
    assert story("/flaky") == story("/steady") == expected
    assert [r.status for r in recorder.all("/flaky")][:3] == [503, 503, 429]
    with Session(engine) as session:
        flaky = list(session.scalars(sa.select(OutboxMessage).where(OutboxMessage.receiver == "flaky")))
    assert all(m.status == "delivered" for m in flaky)
    assert max(m.attempts for m in flaky) == 3


def test_pagerduty_events_and_a_refused_event_set_aside(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    # PagerDuty answers 202 with its dedup_key; 400 means the event is invalid (won't improve).
    recorder.on("/v2/enqueue", statuses=[400], ok_status=202, ok_body=b'{"status":"success"}')
    rk = "R0UT1NGKEY0000000000000000000000"
    dispatcher = Dispatcher(
        engine,
        settings(recorder, {"name": "pd", "type": "pagerduty", "url": "/v2/enqueue", "routing_key": rk}),
    )
    store.apply([finding(entity="p1", t=0), finding(entity="p2", t=1)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/v2/enqueue")) == 1)
    (ok,) = recorder.delivered("/v2/enqueue")
    assert ok.json()["dedup_key"] == "graywire-incident-2" and ok.json()["routing_key"] == rk
    assert dispatcher.dead["pd"] == 1
    with Session(engine) as session:
        dead = session.scalars(sa.select(OutboxMessage).where(OutboxMessage.status == "dead")).one()
    assert dead.incident_id == 1 and dead.last_error.startswith("HTTP 400")


def test_slack_and_unreachable_receiver(store: IncidentStore, engine: Engine, recorder: Recorder) -> None:
    s = settings(recorder, {"name": "chat", "type": "slack", "url": "/services/T0/B0/x"})
    s.receivers.append(s.receivers[0].model_copy(update={"name": "gone", "url": "http://127.0.0.1:9"}))
    dispatcher = Dispatcher(engine, s)
    store.apply([finding(t=0)])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/services/")) == 1)
    assert recorder.delivered("/services/")[0].json()["text"].startswith(":red_circle: CRITICAL")
    cycle_until(dispatcher, lambda: dispatcher.failed_attempts["gone"] >= 2)
    with Session(engine) as session:
        gone = session.scalars(sa.select(OutboxMessage).where(OutboxMessage.receiver == "gone")).one()
    assert gone.status == "pending" and gone.attempts >= 2 and "Connect" in (gone.last_error or "")

    registry = CollectorRegistry()
    registry.register(AlertsExporter(dispatcher))
    text = generate_latest(registry).decode()
    assert 'graywire_alert_messages_total{receiver="chat",result="delivered"} 1.0' in text
    assert 'graywire_alert_outbox_pending{receiver="gone"} 1.0' in text
    assert 'graywire_alert_outbox_pending{receiver="chat"} 0.0' in text
    failures = re.search(r'graywire_alert_delivery_failures_total\{receiver="gone"\} (\S+)', text)
    assert failures and float(failures.group(1)) >= 2
    age = re.search(r'graywire_alert_outbox_oldest_pending_seconds\{receiver="gone"\} (\S+)', text)
    assert age and float(age.group(1)) > 0


def test_unrenderable_message_is_set_aside_not_retried_forever(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    dispatcher = Dispatcher(engine, settings(recorder, {"name": "noc", "type": "webhook", "url": "/hook"}))
    store.apply([finding(entity="p1", t=0), finding(entity="p2", t=1)])
    asyncio.run(asyncio.to_thread(dispatcher.sync))
    with Session(engine) as session, session.begin():  # e.g. written by an incompatible version
        session.execute(sa.update(OutboxMessage).where(OutboxMessage.incident_id == 1).values(event={}))
    cycle_until(dispatcher, lambda: len(recorder.delivered("/hook")) == 1)
    assert recorder.delivered("/hook")[0].json()["groupLabels"] == {"incident_id": "2"}
    assert dispatcher.dead["noc"] == 1


def test_service_loop_keeps_a_hanging_receiver_from_delaying_the_others(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    recorder.on("/slow", delay_s=3.0)
    s = settings(recorder, {"name": "slow", "type": "webhook", "url": "/slow", "timeout": "5s"},
                 {"name": "fast", "type": "webhook", "url": "/fast"})  # fmt: skip
    s = s.model_copy(update={"sync_interval": timedelta(milliseconds=50)})
    dispatcher = Dispatcher(engine, s)

    async def go() -> None:
        task = asyncio.create_task(dispatcher.run())
        try:
            store.apply([finding(entity="p1", t=0)])
            await asyncio.to_thread(recorder.wait_for, lambda: recorder.started.count("/slow") == 1)
            # While the slow receiver holds its first message, new incidents still go out elsewhere.
            store.apply([finding(entity="p2", t=1), finding(entity="p3", t=2)])
            await asyncio.to_thread(recorder.wait_for, lambda: len(recorder.delivered("/fast")) == 3, 2.5)
            assert recorder.delivered("/slow") == []
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(go())


def test_credentials_in_an_alertmanager_url_are_used_but_never_exposed(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    # An Alertmanager behind a basic-auth proxy. The receiver's name is a /metrics label
    # (open to every scraper), a database key and in every log line about it.
    url = recorder.url.replace("http://", "http://graywire:hunter2-secret@") + "/am"
    s = AlertsSettings(min_severity="info", alertmanager={"urls": [url]}, retry=FAST_RETRY)
    dispatcher = Dispatcher(engine, s)
    store.apply([finding()])
    cycle_until(dispatcher, lambda: len(recorder.delivered("/am/api/v2/alerts")) == 1)
    (got,) = recorder.delivered("/am/api/v2/alerts")
    assert {k.lower(): v for k, v in got.headers.items()}["authorization"].startswith("Basic ")
    registry = CollectorRegistry()
    registry.register(AlertsExporter(dispatcher))
    exposed = generate_latest(registry).decode() + " ".join(dispatcher.destinations)
    with Session(engine) as session:
        exposed += " ".join(session.scalars(sa.select(OutboxMessage.receiver)))
    assert "graywire_alert_messages" in exposed and "127.0.0.1" in exposed
    assert "hunter2-secret" not in exposed


def test_held_pages_are_counted_in_the_metrics(
    engine: Engine, store: IncidentStore, recorder: Recorder
) -> None:
    s = settings(recorder, {"name": "chat", "type": "slack", "url": "/services/T0/B0/x"})
    # A fresh incident waits before its first page.
    s = s.model_copy(update={"group_wait": timedelta(hours=1)})
    dispatcher = Dispatcher(engine, s, clock=lambda: T0 + timedelta(seconds=5))
    store.apply([finding(t=0)])
    dispatcher.sync()
    registry = CollectorRegistry()
    registry.register(AlertsExporter(dispatcher))
    text = generate_latest(registry).decode()
    assert "graywire_alert_incidents_held 1.0" in text
    assert "graywire_alert_incidents_inhibited 0.0" in text


def test_a_flood_behind_a_dead_receiver_stays_within_max_outbox_and_keeps_the_pages_that_matter(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    down = recorder.on("/hook", ok_status=503)
    s = settings(recorder, {"name": "noc", "type": "webhook", "url": "/hook"})
    dispatcher = Dispatcher(engine, s.model_copy(update={"max_outbox": 20, "min_severity": "warning"}))

    async def cycle() -> None:
        await asyncio.to_thread(dispatcher.sync)
        await dispatcher.deliver_due()

    waves = 5
    for wave in range(waves):
        t = 10 * wave
        batch = [finding(f"w{wave}-{i}", t=t, severity="warning") for i in range(10)]
        batch.append(finding(f"c{wave}", t=t, severity="critical"))
        if wave:  # a few of the last wave's warnings are over already
            batch += [finding(f"w{wave - 1}-{i}", status="cleared", t=t) for i in range(3)]
        store.apply(batch)
        asyncio.run(cycle())
        assert outbox.backlog(engine)["noc"].pending <= 20
    assert dispatcher.failed_attempts["noc"] > 0 and recorder.delivered("/hook") == []  # down throughout

    registry = CollectorRegistry()
    registry.register(AlertsExporter(dispatcher))
    text = generate_latest(registry).decode()
    drops: dict[tuple[str, str], float] = {}
    for m in re.finditer(r"^graywire_alert_outbox_dropped_total\{(.*)\} (\S+)$", text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        assert labels["receiver"] == "noc"
        drops[(labels["reason"], labels["severity"])] = float(m.group(2))
    assert drops[("resolved", "warning")] > 0  # warnings over before they were sent went first
    assert drops[("firing", "warning")] > 0
    assert ("firing", "critical") not in drops  # while warnings remained, no critical page went
    assert sum(drops.values()) == waves * 11 + (waves - 1) * 3 - 20

    down.ok_status = 200
    cycle_until(dispatcher, lambda: "noc" not in outbox.backlog(engine))  # nothing undelivered
    sent = [r.json()["commonLabels"] for r in recorder.delivered("/hook")]
    assert {lab["entity"] for lab in sent if lab["severity"] == "critical"} == {f"c{w}" for w in range(waves)}
    warnings = {lab["entity"] for lab in sent if lab["severity"] == "warning"}
    assert {f"w{waves - 1}-{i}" for i in range(10)} <= warnings  # the newest wave whole
    assert len(sent) <= 20


def test_a_sender_that_may_no_longer_send_leaves_its_claim_to_the_next(
    store: IncidentStore, engine: Engine, recorder: Recorder
) -> None:
    """A replica paused past its lease between claiming and POSTing: the claim and the ack are
    fenced in the database, the POST is not, so the dispatcher asks just before it."""
    allowed, now = [False], [T0 + timedelta(minutes=5)]
    dispatcher = Dispatcher(
        engine,
        settings(recorder, {"name": "noc", "type": "webhook", "url": "/hook"}),
        clock=lambda: now[0],
        may_send=lambda: allowed[0],
    )
    store.apply([finding(t=0)])

    async def cycles(n: int) -> None:
        for _ in range(n):
            await asyncio.to_thread(dispatcher.sync)
            await dispatcher.deliver_due()

    asyncio.run(cycles(3))
    assert recorder.delivered("/hook") == []
    with Session(engine) as session:
        (message,) = session.scalars(sa.select(OutboxMessage))
        assert message.status != "delivered" and message.attempts == 0  # not a failure: not sent

    allowed[0] = True  # the claim runs out; whoever may send now sends it, once
    now[0] += timedelta(minutes=1)
    cycle_until(dispatcher, lambda: len(recorder.delivered("/hook")) == 1)
    assert [r.json()["status"] for r in recorder.delivered("/hook")] == ["firing"]


def test_a_claim_that_runs_out_before_the_post_would_end_is_not_used(
    engine: Engine, recorder: Recorder
) -> None:
    """The process stalled between the claim and the POST until too little of the claim is left
    for the POST's own timeout: another sender may take the messages meanwhile, so not this one."""
    dispatcher = Dispatcher(
        engine, settings(recorder, {"name": "noc", "type": "webhook", "url": "/hook"}), clock=lambda: T0
    )
    dest = dispatcher.destinations["noc"]
    assert dispatcher._still_ours(dest, T0 + timedelta(seconds=2 * dest.timeout_s + 1))  # just claimed
    assert not dispatcher._still_ours(dest, T0 + timedelta(seconds=dest.timeout_s / 2))  # stalled
    assert not dispatcher._still_ours(dest, T0 - timedelta(seconds=1))  # ran out
