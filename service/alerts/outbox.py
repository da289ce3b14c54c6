"""The durable outbox: enqueue, claim a receiver's head, acknowledge or retry with backoff.

Ordering is per receiver: a receiver's messages go out in id order and a failing head blocks
only that receiver. A receiver that stays away cannot grow its queue without bound:
``enforce_limit`` keeps at most ``alerts.max_outbox`` pending messages per receiver, dropping
what costs on-call least first. A claim is a lease (``claimed_until``), so a dispatcher that dies mid-send
leaves nothing stuck: the lease runs out and the message goes out again. Delivery is thus
at-least-once; every payload carries a stable per-incident key for receivers to dedupe on.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.detectors.findings import SEVERITY_RANK
from graywire.service.alerts.events import AlertEvent
from graywire.service.models import AlertAction, OutboxMessage
from graywire.service.models.engine import SQLITE_BEGIN_IMMEDIATE

log = logging.getLogger("graywire.alerts")

ERROR_LIMIT = 2000
#: Why ``enforce_limit`` dropped a message, in the order it drops them.
DROP_REASONS = ("superseded", "resolved", "resolve", "firing")
_CHUNK = 500


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


@dataclass(frozen=True, slots=True)
class _Droppable:
    """Pending messages that go together (a trigger and its resolve), and why."""

    reason: str
    severity: str
    ids: tuple[int, ...]

    def order(self) -> tuple[int, int, int]:
        """Cheapest first: by reason; firing pages lowest severity first; then oldest first."""
        rank = SEVERITY_RANK.get(self.severity, 0) if self.reason == "firing" else 0
        return DROP_REASONS.index(self.reason), rank, self.ids[0]


def _droppables(messages: Sequence[OutboxMessage], told: bool) -> list[_Droppable]:
    """One incident's pending messages (id order) as the receiver would take them.

    ``told``: the receiver's last delivered message about the incident says it fires. A
    segment is the messages up to and including a resolve. All but the last message of a
    segment are ``superseded`` (a later one says more). A segment ending in a resolve that the
    receiver was never told the start of goes whole (``resolved``): it would page and unpage
    at once. A resolve of a page the receiver has is ``resolve`` (dropping it leaves that page
    open). The last message of an open segment is the page itself (``firing``).

    An acknowledgement (a ``refresh`` of an acknowledged incident: PagerDuty's ``acknowledge``)
    says less than the page before it, not more: it supersedes nothing and is itself dropped
    as ``superseded`` (the page then stays unacknowledged there), before any page.
    """
    out: list[_Droppable] = []
    segment: list[OutboxMessage] = []

    def severity(ms: Sequence[OutboxMessage]) -> str:
        return max((str(m.event.get("severity", "")) for m in ms), key=lambda s: SEVERITY_RANK.get(s, 0))

    def pages(ms: list[OutboxMessage]) -> list[OutboxMessage]:
        acks = [x for x in ms if is_acknowledgement(x)]
        out.extend(_Droppable("superseded", severity([x]), (x.id,)) for x in acks)
        return [x for x in ms if not is_acknowledgement(x)]

    for m in messages:
        segment.append(m)
        if m.action != "resolve":
            continue
        if told:
            out += [_Droppable("superseded", severity([x]), (x.id,)) for x in pages(segment[:-1])]
            out.append(_Droppable("resolve", severity([m]), (m.id,)))
        else:
            out.append(_Droppable("resolved", severity(segment), tuple(x.id for x in segment)))
        told, segment = False, []
    segment = pages(segment)
    if segment:
        out += [_Droppable("superseded", severity([x]), (x.id,)) for x in segment[:-1]]
        out.append(_Droppable("firing", severity(segment[-1:]), (segment[-1].id,)))
    return out


def is_acknowledgement(m: OutboxMessage) -> bool:
    """A refresh of an acknowledged incident: for PagerDuty its ``acknowledge`` event (an
    Alertmanager refresh of an acknowledged incident is one too, and as cheap to lose)."""
    return m.action == "refresh" and bool(m.event.get("acknowledged"))


def enforce_limit(session: Session, receiver: str, limit: int, now: datetime) -> Counter[tuple[str, str]]:
    """Delete ``receiver``'s pending messages beyond ``limit``, cheapest first; in the caller's
    transaction (the sync's, right after it enqueued). Returns ``(reason, severity)`` counts.

    Superseded messages go first, then episodes over before they could be sent (trigger and
    resolve together), then resolves of pages the receiver has, and only then firing pages,
    info before warning before critical, oldest first within each, so the newest and most
    severe pages are the last to go. A message being sent right now is left alone.
    """
    pending = OutboxMessage.receiver == receiver, OutboxMessage.status == "pending"
    count = session.scalar(sa.select(sa.func.count()).select_from(OutboxMessage).where(*pending)) or 0
    if count <= limit:
        return Counter()
    rows = list(session.scalars(sa.select(OutboxMessage).where(*pending).order_by(OutboxMessage.id)))
    by_incident: dict[int, list[OutboxMessage]] = {}
    for m in rows:
        by_incident.setdefault(m.incident_id, []).append(m)
    # What the receiver was last told of each incident (messages go out in id order).
    told: set[int] = set()
    ids = sorted(by_incident)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        last = (
            sa.select(sa.func.max(OutboxMessage.id))
            .where(
                OutboxMessage.receiver == receiver,
                OutboxMessage.status == "delivered",
                OutboxMessage.incident_id.in_(chunk),
            )
            .group_by(OutboxMessage.incident_id)
        )
        told |= set(
            session.scalars(
                sa.select(OutboxMessage.incident_id).where(
                    OutboxMessage.id.in_(last.scalar_subquery()), OutboxMessage.action != "resolve"
                )
            )
        )
    busy = {m.id for m in rows if m.claimed_until is not None and m.claimed_until > now}
    candidates = [
        d
        for incident_id, messages in by_incident.items()
        for d in _droppables(messages, incident_id in told)
        if not busy.intersection(d.ids)
    ]
    dropped: Counter[tuple[str, str]] = Counter()
    doomed: list[int] = []
    excess = count - limit
    for d in sorted(candidates, key=_Droppable.order):
        if excess <= 0:
            break
        doomed += d.ids
        excess -= len(d.ids)
        dropped[(d.reason, d.severity)] += len(d.ids)
    for start in range(0, len(doomed), _CHUNK):
        session.execute(
            sa.delete(OutboxMessage)
            .where(OutboxMessage.id.in_(doomed[start : start + _CHUNK]))
            .execution_options(synchronize_session=False)
        )
    lost = sum(
        n for (reason, severity), n in dropped.items() if reason == "firing" and severity == "critical"
    )
    (log.error if lost else log.warning)(
        "alerts: %s has %d messages pending, over alerts.max_outbox (%d); dropped %s",
        receiver,
        count,
        limit,
        ", ".join(f"{n} {reason} {severity}" for (reason, severity), n in sorted(dropped.items())),
    )
    return dropped
