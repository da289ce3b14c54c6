"""The durable outbox: enqueue, claim a receiver's head, acknowledge or retry with backoff.

Ordering is per receiver: a receiver's messages go out in id order and a failing head blocks
only that receiver. A claim is a lease (``claimed_until``), so a dispatcher that dies mid-send
leaves nothing stuck: the lease runs out and the message goes out again. Delivery is thus
at-least-once; every payload carries a stable per-incident key for receivers to dedupe on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from service.alerts.events import AlertEvent
from service.alerts.models import AlertAction, OutboxMessage
from service.db import SQLITE_BEGIN_IMMEDIATE

ERROR_LIMIT = 2000


def backoff_seconds(attempt: int, initial: float, maximum: float, jitter: float, rng: random.Random) -> float:
    """Delay before retry number ``attempt`` (1-based): ``initial * 2**(attempt-1)``, capped at
    ``maximum``, then shortened by a random fraction up to ``jitter`` (never above the cap)."""
    exponent = min(max(attempt - 1, 0), 62)
    delay = min(maximum, initial * 2.0**exponent)
    return delay * (1.0 - jitter * rng.random())


def enqueue(
    session: Session, receiver: str, action: AlertAction, event: AlertEvent, now: datetime
) -> OutboxMessage:
    """Add a message in the caller's transaction (the sync step's, with its state change)."""
    msg = OutboxMessage(
        receiver=receiver,
        incident_id=event.incident_id,
        action=action,
        status="pending",
        event=event.to_dict(),
        created_at=now,
        next_attempt_at=now,
        attempts=0,
    )
    session.add(msg)
    return msg


def claim_head(
    engine: Engine, receiver: str, now: datetime, lease_s: float, limit: int = 1
) -> list[OutboxMessage]:
    """Claim up to ``limit`` of ``receiver``'s oldest pending messages, or none.

    Nothing is claimed while the head waits for its backoff or is leased by someone else: a
    later message must never overtake it. The claim is a compare-and-set on ``claimed_until``,
    so two dispatchers sharing a database never send the same message at once.
    """
    with Session(engine, expire_on_commit=False) as session, session.begin():
        session.connection(execution_options={SQLITE_BEGIN_IMMEDIATE: True})
        rows = list(
            session.scalars(
                sa.select(OutboxMessage)
                .where(OutboxMessage.receiver == receiver, OutboxMessage.status == "pending")
                .order_by(OutboxMessage.id)
                .limit(limit)
            )
        )
        if not rows:
            return []
        head = rows[0]
        if head.next_attempt_at > now or (head.claimed_until is not None and head.claimed_until > now):
            return []
        # Later messages ride along only while they are unleased and due as well.
        batch = [head]
        for m in rows[1:]:
            if m.next_attempt_at > now or (m.claimed_until is not None and m.claimed_until > now):
                break
            batch.append(m)
        ids = [m.id for m in batch]
        free = sa.or_(OutboxMessage.claimed_until.is_(None), OutboxMessage.claimed_until <= now)
        result = session.execute(
            sa.update(OutboxMessage)
            .where(OutboxMessage.id.in_(ids), OutboxMessage.status == "pending", free)
            .values(claimed_until=now + timedelta(seconds=lease_s))
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != len(ids):
            session.rollback()  # someone else claimed part of it first
            return []
        return batch


@dataclass(frozen=True, slots=True)
class Backlog:
    """Undelivered messages of one receiver: pending ones (and since when the oldest waits),
    and dead ones (refused for good, kept for inspection)."""

    pending: int
    oldest_pending: datetime | None
    dead: int


def _utc(value: object) -> datetime:
    """An aggregate (min) loses the column type on SQLite: parse and tag it as UTC."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def backlog(engine: Engine) -> dict[str, Backlog]:
    """Per receiver with anything undelivered, including receivers no longer configured."""
    query = (
        sa.select(
            OutboxMessage.receiver,
            OutboxMessage.status,
            sa.func.count(),
            sa.func.min(OutboxMessage.created_at),
        )
        .where(OutboxMessage.status != "delivered")
        .group_by(OutboxMessage.receiver, OutboxMessage.status)
    )
    pending: dict[str, tuple[int, datetime]] = {}
    dead: dict[str, int] = {}
    with Session(engine) as session:
        for receiver, status, count, oldest in session.execute(query):
            if status == "pending":
                pending[receiver] = (int(count), _utc(oldest))
            else:
                dead[receiver] = int(count)
    out = {}
    for receiver in sorted(set(pending) | set(dead)):
        count, oldest = pending.get(receiver, (0, None))
        out[receiver] = Backlog(count, oldest, dead.get(receiver, 0))
    return out


def ack(engine: Engine, ids: Sequence[int], now: datetime) -> None:
    """Mark messages delivered (the receiver answered 2xx)."""
    with Session(engine) as session, session.begin():
        session.execute(
            sa.update(OutboxMessage)
            .where(OutboxMessage.id.in_(list(ids)))
            .values(status="delivered", delivered_at=now, claimed_until=None, last_error=None)
            .execution_options(synchronize_session=False)
        )


def retry(
    engine: Engine,
    ids: Sequence[int],
    error: str,
    now: datetime,
    delay: float,
) -> None:
    """Count a failed attempt and schedule the next one ``delay`` seconds from now."""
    with Session(engine) as session, session.begin():
        session.execute(
            sa.update(OutboxMessage)
            .where(OutboxMessage.id.in_(list(ids)))
            .values(
                attempts=OutboxMessage.attempts + 1,
                next_attempt_at=now + timedelta(seconds=delay),
                claimed_until=None,
                last_error=error[:ERROR_LIMIT],
            )
            .execution_options(synchronize_session=False)
        )


def give_up(engine: Engine, ids: Sequence[int], error: str) -> None:
    """The receiver refused the payload itself (a 4xx that no retry can fix): stop, keep it."""
    with Session(engine) as session, session.begin():
        session.execute(
            sa.update(OutboxMessage)
            .where(OutboxMessage.id.in_(list(ids)))
            .values(
                status="dead",
                attempts=OutboxMessage.attempts + 1,
                claimed_until=None,
                last_error=error[:ERROR_LIMIT],
            )
            .execution_options(synchronize_session=False)
        )


def prune_delivered(session: Session, before: datetime) -> int:
    """Delete messages delivered before ``before``; pending and dead ones stay."""
    result = session.execute(
        sa.delete(OutboxMessage).where(
            OutboxMessage.status == "delivered", OutboxMessage.delivered_at < before
        )
    )
    return int(result.rowcount or 0)
