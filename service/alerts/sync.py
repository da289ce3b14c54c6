"""Derive alert events from the incidents table, in one transaction per sync.

The sync compares every incident that is active, or that some receiver still believes firing,
with ``alert_state`` and enqueues the difference (trigger, refresh, resolve) together with the
new state. It reads only committed incidents and writes state and messages atomically, so a
crash anywhere loses nothing and duplicates nothing: the next sync sees the same difference.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from service.alerts import outbox
from service.alerts.events import AlertEvent
from service.alerts.models import AlertState
from service.db import ACTIVE_STATUSES, SEVERITIES, SQLITE_BEGIN_IMMEDIATE, Incident

log = logging.getLogger("graywire.alerts")

SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
#: Serializes syncs of replicas sharing one PostgreSQL database (any fixed 64-bit number).
_PG_LOCK_ID = 0x67727977_616C7274


@dataclass(frozen=True, slots=True)
class SyncTarget:
    """What the sync needs to know of a receiver."""

    name: str
    min_severity: str
    #: Alertmanager only: re-post firing alerts this often, and re-label by resolve + trigger.
    refresh_s: float | None = None


@dataclass(slots=True)
class SyncResult:
    triggered: int = 0
    refreshed: int = 0
    resolved: int = 0
    pruned: int = 0


def _snapshot(inc: Incident, started_at: datetime) -> AlertEvent:
    status = "firing" if inc.status in ACTIVE_STATUSES else "resolved"
    return AlertEvent.from_incident(inc, status, started_at)


def _resolve_of(sent: AlertEvent, inc: Incident, now: datetime) -> AlertEvent:
    """The resolve of what was sent: same labels (severity, node, port, link) and start."""
    resolved_at = inc.resolved_at if inc.status not in ACTIVE_STATUSES and inc.resolved_at else now
    return dataclasses.replace(
        sent,
        status="resolved",
        summary=inc.summary,
        last_seen_at=inc.last_seen_at.isoformat(),
        resolved_at=resolved_at.isoformat(),
        finding_count=inc.finding_count,
    )


def sync_alerts(
    engine: Engine, targets: list[SyncTarget], now: datetime, retention_s: float | None = None
) -> SyncResult:
    """Enqueue what each receiver has not been told yet; one transaction for all receivers."""
    result = SyncResult()
    if not targets:
        return result
    with Session(engine, expire_on_commit=False) as session, session.begin():
        conn = session.connection(execution_options={SQLITE_BEGIN_IMMEDIATE: True})
        if conn.dialect.name == "postgresql":
            session.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_ID)))
        for target in targets:
            _sync_receiver(session, target, now, result)
        if retention_s is not None:
            result.pruned = outbox.prune_delivered(session, now - timedelta(seconds=retention_s))
    if result.triggered or result.resolved:
        log.info("alerts: %d triggers, %d resolves enqueued", result.triggered, result.resolved)
    return result


def _sync_receiver(session: Session, target: SyncTarget, now: datetime, result: SyncResult) -> None:
    name = target.name
    floor = SEVERITY_RANK[target.min_severity]
    state_join = sa.and_(AlertState.incident_id == Incident.id, AlertState.receiver == name)
    rows = session.execute(
        sa.select(Incident, AlertState)
        .outerjoin(AlertState, state_join)
        .where(sa.or_(Incident.status.in_(ACTIVE_STATUSES), AlertState.state == "firing"))
        .order_by(Incident.id)
    ).all()
    has_pending: set[int] = set()
    if target.refresh_s is not None:
        has_pending = set(
            session.scalars(
                sa.select(outbox.OutboxMessage.incident_id).where(
                    outbox.OutboxMessage.receiver == name,
                    outbox.OutboxMessage.status == "pending",
                )
            )
        )

    for inc, state in rows:
        active = inc.status in ACTIVE_STATUSES
        eligible = active and SEVERITY_RANK.get(inc.severity, 0) >= floor
        firing = state is not None and state.state == "firing"
        same_episode = firing and state.episode == inc.reopen_count

        if firing and (not active or not same_episode):
            # Resolved, or resolved and reopened between two syncs: close what was sent first.
            resolve = _resolve_of(AlertEvent.from_dict(state.event), inc, now)
            outbox.enqueue(session, name, "resolve", resolve, now)
            result.resolved += 1
            state.state = "resolved"
            state.event = resolve.to_dict()
            state.last_enqueued_at = now
            firing = False

        if not firing:
            if not eligible:
                continue
            # A new episode starts with the reopening finding; the first with the opening.
            started = inc.opened_at if inc.reopen_count == 0 else inc.last_seen_at
            event = _snapshot(inc, started)
            outbox.enqueue(session, name, "trigger", event, now)
            result.triggered += 1
            if state is None:
                state = AlertState(incident_id=inc.id, receiver=name)
                session.add(state)
            state.state = "firing"
            state.episode = inc.reopen_count
            state.started_at = started
            state.last_enqueued_at = now
            state.event = event.to_dict()
            continue

        # Still firing, same episode.
        sent = AlertEvent.from_dict(state.event)
        current = _snapshot(inc, state.started_at)
        if current.labels() != sent.labels():
            if target.refresh_s is not None:
                # Alertmanager knows alerts by label set: retire the old set, post the new one.
                outbox.enqueue(session, name, "resolve", _resolve_of(sent, inc, now), now)
                outbox.enqueue(session, name, "trigger", current, now)
                result.resolved += 1
                result.triggered += 1
            elif SEVERITY_RANK.get(current.severity, 0) > SEVERITY_RANK.get(sent.severity, 0):
                outbox.enqueue(session, name, "trigger", current, now)  # escalation: same dedup key
                result.triggered += 1
            state.event = current.to_dict()
            state.last_enqueued_at = now
        elif (
            target.refresh_s is not None
            and (now - state.last_enqueued_at).total_seconds() >= target.refresh_s
            and inc.id not in has_pending  # an unreachable Alertmanager gets no pile-up
        ):
            outbox.enqueue(session, name, "refresh", current, now)
            state.event = current.to_dict()
            state.last_enqueued_at = now
            result.refreshed += 1
