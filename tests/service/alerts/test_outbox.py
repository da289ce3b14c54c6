"""The outbox: backoff, per-receiver ordering, leases, acknowledgement (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.service.alerts import outbox
from graywire.service.alerts.events import AlertEvent
from graywire.service.models import OutboxMessage
from tests.service.alerts.conftest import T0


def event(incident_id: int) -> AlertEvent:
    iso = T0.isoformat()
    return AlertEvent(
        incident_id=incident_id, status="firing", kind="k", entity=f"e{incident_id}", severity="warning",
        summary="s", detector="d", score=1.0, confidence=1.0, node=None, port=None, link=None,
        started_at=iso, opened_at=iso, last_seen_at=iso, resolved_at=None, reopen_count=0, finding_count=1,
    )  # fmt: skip


def fill(engine: Engine, plan: list[tuple[str, int]]) -> list[int]:
    with Session(engine) as session, session.begin():
        msgs = [outbox.enqueue(session, r, "trigger", event(i), T0) for r, i in plan]
        session.flush()
        return [m.id for m in msgs]


def status(engine: Engine) -> dict[int, tuple[str, int]]:
    with Session(engine) as session:
        return {m.id: (m.status, m.attempts) for m in session.scalars(sa.select(OutboxMessage))}


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens() -> None:
    rng = random.Random(1)
    plain = [outbox.backoff_seconds(a, 2.0, 60.0, 0.0, rng) for a in range(1, 9)]
    assert plain == [2, 4, 8, 16, 32, 60, 60, 60]
    for attempt in range(1, 40):
        d = outbox.backoff_seconds(attempt, 2.0, 60.0, 0.2, rng)
        full = min(60.0, 2.0 * 2 ** (attempt - 1))
        assert 0.8 * full <= d <= full
    assert outbox.backoff_seconds(10_000, 2.0, 60.0, 0.0, rng) == 60.0  # no overflow


def test_claims_follow_id_order_per_receiver(engine: Engine) -> None:
    ids = fill(engine, [("a", 1), ("b", 2), ("a", 3), ("a", 4)])
    first = outbox.claim_head(engine, "a", T0, lease_s=30)
    assert [m.id for m in first] == [ids[0]]
    # Leased: nothing else of "a" may overtake it, "b" is independent.
    assert outbox.claim_head(engine, "a", T0, lease_s=30) == []
    assert [m.id for m in outbox.claim_head(engine, "b", T0, lease_s=30)] == [ids[1]]
    outbox.ack(engine, [ids[0]], T0)
    batch = outbox.claim_head(engine, "a", T0, lease_s=30, limit=10)
    assert [m.id for m in batch] == [ids[2], ids[3]]


def test_failing_head_blocks_only_its_receiver(engine: Engine) -> None:
    ids = fill(engine, [("a", 1), ("a", 2), ("b", 3)])
    (head,) = outbox.claim_head(engine, "a", T0, lease_s=30)
    outbox.retry(engine, [head.id], "HTTP 503", T0, delay=10)
    assert outbox.claim_head(engine, "a", T0 + timedelta(seconds=9), lease_s=30) == []
    assert [m.id for m in outbox.claim_head(engine, "b", T0, lease_s=30)] == [ids[2]]
    again = outbox.claim_head(engine, "a", T0 + timedelta(seconds=10), lease_s=30)
    assert [m.id for m in again] == [ids[0]]
    assert again[0].attempts == 1 and again[0].last_error == "HTTP 503"


def test_an_expired_lease_is_claimed_again(engine: Engine) -> None:
    """A dispatcher killed mid-send holds its lease until it runs out, then the message retries."""
    (mid,) = fill(engine, [("a", 1)])
    assert outbox.claim_head(engine, "a", T0, lease_s=5)
    assert outbox.claim_head(engine, "a", T0 + timedelta(seconds=4), lease_s=5) == []
    assert [m.id for m in outbox.claim_head(engine, "a", T0 + timedelta(seconds=5), lease_s=5)] == [mid]


def test_refused_message_is_set_aside_and_the_next_goes(engine: Engine) -> None:
    ids = fill(engine, [("a", 1), ("a", 2)])
    outbox.claim_head(engine, "a", T0, lease_s=5)
    outbox.give_up(engine, [ids[0]], "HTTP 400: invalid event")
    assert [m.id for m in outbox.claim_head(engine, "a", T0, lease_s=5)] == [ids[1]]
    assert status(engine)[ids[0]] == ("dead", 1)
    assert outbox.backlog(engine) == {"a": outbox.Backlog(pending=1, oldest_pending=T0, dead=1)}


def test_prune_deletes_only_old_delivered_messages(engine: Engine) -> None:
    ids = fill(engine, [("a", 1), ("a", 2), ("a", 3)])
    outbox.ack(engine, [ids[0]], T0)
    outbox.ack(engine, [ids[1]], T0 + timedelta(days=2))
    with Session(engine) as session, session.begin():
        assert outbox.prune_delivered(session, T0 + timedelta(days=1)) == 1
    assert set(status(engine)) == {ids[1], ids[2]}
    assert outbox.backlog(engine) == {"a": outbox.Backlog(pending=1, oldest_pending=T0, dead=0)}


@pytest.mark.parametrize("limit", [1, 3])
def test_a_later_message_in_backoff_ends_the_batch(engine: Engine, limit: int) -> None:
    ids = fill(engine, [("a", 1), ("a", 2), ("a", 3)])
    outbox.retry(engine, [ids[1]], "x", T0, delay=60)  # e.g. left over from a smaller batch
    got = outbox.claim_head(engine, "a", T0, lease_s=5, limit=limit)
    assert [m.id for m in got] == [ids[0]]


def test_concurrent_dispatchers_never_claim_the_same_message(engine: Engine) -> None:
    """Replicas sharing one database: each message is claimed by exactly one of them."""
    from concurrent.futures import ThreadPoolExecutor

    ids = fill(engine, [("a", i) for i in range(20)])
    claimed: list[int] = []
    for round_ in range(len(ids)):
        now = T0 + timedelta(seconds=round_)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(outbox.claim_head, [engine] * 4, ["a"] * 4, [now] * 4, [30.0] * 4))
        winners = [r for r in results if r]
        assert len(winners) == 1, f"round {round_}: {len(winners)} dispatchers claimed the head"
        claimed.append(winners[0][0].id)
        outbox.ack(engine, [winners[0][0].id], now)
    assert claimed == ids


def test_over_the_limit_the_cheapest_messages_are_dropped_first(engine: Engine) -> None:
    # (incident, action, severity, status) in enqueue order for receiver "a".
    plan = [
        (1, "trigger", "critical", "delivered"),  # the receiver has incident 1's page
        (1, "trigger", "critical", "pending"),  # ... an update of it, which the resolve supersedes
        (2, "trigger", "warning", "pending"),  # 2 fired and cleared before anything was sent
        (2, "resolve", "warning", "pending"),
        (1, "resolve", "critical", "pending"),  # closes the page the receiver has
        (3, "trigger", "info", "pending"),
        (4, "trigger", "warning", "pending"),
        (5, "trigger", "critical", "pending"),
        (6, "trigger", "warning", "pending"),
    ]
    with Session(engine) as session, session.begin():
        msgs = []
        for incident, action, severity, state in plan:
            status_ = "resolved" if action == "resolve" else "firing"
            ev = dataclasses.replace(event(incident), severity=severity, status=status_)
            m = outbox.enqueue(session, "a", action, ev, T0)
            m.status = state
            msgs.append(m)
        session.flush()
        ids = [m.id for m in msgs]

    def keep(limit: int) -> tuple[list[int], dict[tuple[str, str], int]]:
        with Session(engine) as session, session.begin():
            dropped = outbox.enforce_limit(session, "a", limit, T0)
        left = [i for i, (s, _) in sorted(status(engine).items()) if s == "pending"]
        return [ids.index(i) for i in left], dict(dropped)

    assert keep(7) == ([2, 3, 4, 5, 6, 7, 8], {("superseded", "critical"): 1})
    assert keep(5) == ([4, 5, 6, 7, 8], {("resolved", "warning"): 2})  # trigger and resolve together
    assert keep(4) == ([5, 6, 7, 8], {("resolve", "critical"): 1})
    assert keep(3) == ([6, 7, 8], {("firing", "info"): 1})
    assert keep(2) == ([7, 8], {("firing", "warning"): 1})  # the oldest warning first
    assert keep(1) == ([7], {("firing", "warning"): 1})  # critical after every lower one
    assert keep(1) == ([7], {})  # within the limit: nothing to do
    assert status(engine)[ids[0]] == ("delivered", 0)  # delivered history is not the queue


def test_a_message_being_sent_is_not_dropped(engine: Engine) -> None:
    ids = fill(engine, [("a", 1), ("a", 2), ("a", 3)])
    assert [m.id for m in outbox.claim_head(engine, "a", T0, lease_s=30)] == [ids[0]]
    with Session(engine) as session, session.begin():
        assert outbox.enforce_limit(session, "a", 1, T0) == {("firing", "warning"): 2}
    assert [i for i, (s, _) in status(engine).items() if s == "pending"] == [ids[0]]
