"""Derive alert events from the incidents table, in one transaction per sync.

The sync compares every incident that is active, or that some receiver still believes firing,
with ``alert_state`` and enqueues the difference (trigger, refresh, resolve) together with the
new state. It reads only committed incidents and writes state and messages atomically, so a
crash anywhere loses nothing and duplicates nothing: the next sync sees the same difference.

An incident whose root cause is another active incident (``caused_by``: a slow NCCL rank
behind a bad link, a link behind a failing switch) is not triggered on a direct receiver: its
cause is the page, and it folds under it. Should the cause resolve first, the effect pages on
its own. Alertmanager is told of everything and inhibits by labels, as its users configure it
(the shipped example: link alerts under a failing switch by ``switch``, NCCL alerts under a bad
link by ``port``).

Direct receivers (webhook, PagerDuty, Slack) have no inhibition of their own, so the sync does
it for them: a new incident's first trigger waits ``group_wait`` (a switch incident arriving
meanwhile can still inhibit it), and incidents behind a switch with an active switch incident
are not triggered. Neither writes anything: a held or inhibited incident is simply not enqueued
yet, and the next sync decides again from what is committed.

An episode that opened and resolved while the database was unavailable is stored already
resolved, and is neither active nor believed firing by anyone: the store records it in
``late_episodes`` and the sync pages it from there, once per receiver, as a trigger followed by
its resolve under the incident's usual key (Alertmanager gets the trigger only; see
``_page_late``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.detectors.findings import SEVERITY_RANK
from graywire.service.alerts import outbox
from graywire.service.alerts.events import NO_CONTEXT, AlertContext, AlertEvent, EventStatus
from graywire.service.alerts.inhibit import load_effect_lines, load_effects, load_inhibited
from graywire.service.models import ACTIVE_STATUSES, AlertState, Incident, LateEpisode, Silence
from graywire.service.models.engine import SQLITE_BEGIN_IMMEDIATE

log = logging.getLogger("graywire.alerts")

#: Serializes syncs of replicas sharing one PostgreSQL database (any fixed 64-bit number).
_PG_LOCK_ID = 0x67727977_616C7274


@dataclass(frozen=True, slots=True)
class SyncTarget:
    """What the sync needs to know of a receiver."""

    name: str
    min_severity: str
    #: Alertmanager only: re-post firing alerts this often, and re-label by resolve + trigger.
    refresh_s: float | None = None
    #: Direct receivers only: inhibit incidents behind a failing switch, and hold a new
    #: incident's first trigger until it is this old (0 = no holding).
    inhibit: bool = False
    group_wait_s: float = 0.0
    #: Pending messages kept at most (``alerts.max_outbox``); None: no limit.
    max_pending: int | None = None
    #: Static labels, instance, runbook links and fabric places every event carries.
    context: AlertContext = NO_CONTEXT
    #: PagerDuty only: an operator's ack of a paged incident is passed on once (a ``refresh``
    #: of the acknowledged incident, which the PagerDuty renderer sends as ``acknowledge``).
    acknowledge: bool = False


@dataclass(slots=True)
class SyncResult:
    triggered: int = 0
    refreshed: int = 0
    resolved: int = 0
    pruned: int = 0
    #: Triggers not enqueued this sync: still within group_wait, or behind a failing switch.
    held: int = 0
    inhibited: int = 0
    #: Episodes stored only after they ended, paged now (summed over receivers).
    late: int = 0
    #: Pending messages dropped over ``max_pending``: (receiver, reason, severity) -> count.
    dropped: Counter[tuple[str, str, str]] = dataclasses.field(default_factory=Counter)


def _snapshot(
    inc: Incident, started_at: datetime, context: AlertContext, effects: dict[int, list[str]]
) -> AlertEvent:
    status = "firing" if inc.status in ACTIVE_STATUSES else "resolved"
    event = AlertEvent.from_incident(inc, status, started_at, context)
    return dataclasses.replace(event, effects=effects.get(inc.id, [])) if inc.id in effects else event


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


def _late_event(ep: LateEpisode, status: EventStatus, context: AlertContext) -> AlertEvent:
    """The episode as it stood when it ended, from when it fired."""
    inc = ep.incident
    late = (inc.get("evidence") or {}).get("stored_late")
    event = AlertEvent(
        incident_id=ep.incident_id,
        status=status,
        kind=inc["kind"],
        entity=inc["entity"],
        severity=inc["severity"],
        summary=inc["summary"],
        detector=inc["detector"],
        score=float(inc["score"]),
        confidence=float(inc["confidence"]),
        node=inc["node"],
        port=inc["port"],
        link=inc["link"],
        started_at=ep.fired_at.isoformat(),
        opened_at=inc["opened_at"],
        last_seen_at=inc["last_seen_at"],
        resolved_at=ep.cleared_at.isoformat() if status == "resolved" else None,
        reopen_count=ep.episode,
        finding_count=int(inc["finding_count"]),
        stored_late=late if isinstance(late, dict) else None,
    )
    return context.describe(event, inc.get("evidence"))


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
        # An operator's silence (POST /api/v1/incidents/{id}/silence) mutes new pages and
        # escalations; what was already sent still refreshes and resolves as usual.
        silenced = {
            (kind, entity)
            for kind, entity in session.execute(
                sa.select(Silence.kind, Silence.entity).where(Silence.expires_at > now)
            )
        }
        inhibited = load_inhibited(session) if any(t.inhibit for t in targets) else set()
        effects = load_effects(session) if any(t.inhibit for t in targets) else set()
        effect_lines = load_effect_lines(session)
        late: dict[int, list[LateEpisode]] = {}
        for ep in session.scalars(
            sa.select(LateEpisode).order_by(LateEpisode.incident_id, LateEpisode.episode)
        ):
            late.setdefault(ep.incident_id, []).append(ep)
        for target in targets:
            held_back = (inhibited | effects) if target.inhibit else set()
            _sync_receiver(session, target, now, result, silenced, held_back, late, effect_lines)
        if retention_s is not None:
            before = now - timedelta(seconds=retention_s)
            result.pruned = outbox.prune_delivered(session, before)
            # A receiver configured later is told of late episodes stored within the retention.
            session.execute(sa.delete(LateEpisode).where(LateEpisode.stored_at < before))
    if result.triggered or result.resolved:
        log.info("alerts: %d triggers, %d resolves enqueued", result.triggered, result.resolved)
    if result.late:
        log.warning("alerts: %d episodes stored after the database came back paged late", result.late)
    return result


def _page_late(
    session: Session,
    target: SyncTarget,
    ep: LateEpisode,
    state: AlertState | None,
    now: datetime,
    result: SyncResult,
    quiet: bool,
) -> AlertState:
    """Tell ``target`` of an episode that was over before it was stored, and remember that.

    Direct receivers get a trigger and its resolve back to back: PagerDuty opens an incident
    (and notifies) on the trigger and resolves it on the resolve. Alertmanager gets only the
    trigger, a firing alert from when the episode fired, ending by itself after the usual four
    refresh intervals: Alertmanager never notifies an alert whose first post is already
    resolved, nor one resolved before its group_wait is up, so an honest endsAt would page
    nobody. Every text says when it fired and cleared and that it was stored late.
    """
    name = target.name
    last = _late_event(ep, "resolved", target.context)
    if not quiet:
        trigger = _late_event(ep, "firing", target.context)
        outbox.enqueue(session, name, "trigger", trigger, now)
        result.triggered += 1
        result.late += 1
        if target.refresh_s is None:
            outbox.enqueue(session, name, "resolve", last, now)
            result.resolved += 1
        else:
            last = trigger
    if state is None:
        state = AlertState(incident_id=ep.incident_id, receiver=name)
        session.add(state)
    state.state = "resolved"
    state.episode = ep.episode
    state.started_at = ep.fired_at
    state.last_enqueued_at = now
    state.event = last.to_dict()
    return state


def _sync_receiver(
    session: Session,
    target: SyncTarget,
    now: datetime,
    result: SyncResult,
    silenced: set[tuple[str, str]],
    inhibited: set[int],
    late: dict[int, list[LateEpisode]],
    effect_lines: dict[int, list[str]],
) -> None:
    name = target.name
    floor = SEVERITY_RANK[target.min_severity]
    state_join = sa.and_(AlertState.incident_id == Incident.id, AlertState.receiver == name)
    untold_late = sa.select(LateEpisode.incident_id).where(
        LateEpisode.episode > sa.func.coalesce(AlertState.episode, -1)
    )
    rows = session.execute(
        sa.select(Incident, AlertState)
        .outerjoin(AlertState, state_join)
        .where(
            sa.or_(
                Incident.status.in_(ACTIVE_STATUSES),
                AlertState.state == "firing",
                Incident.id.in_(untold_late),
            )
        )
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
        muted = (inc.kind, inc.entity) in silenced
        behind_failing_switch = inc.id in inhibited
        eligible = active and not muted and SEVERITY_RANK.get(inc.severity, 0) >= floor
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

        # Episodes over before they were stored come next, in order, before any new episode.
        for ep in late.get(inc.id, ()):
            if state is None or ep.episode > state.episode:
                floor_ok = SEVERITY_RANK.get(ep.incident["severity"], 0) >= floor
                quiet = muted or behind_failing_switch or not floor_ok
                state = _page_late(session, target, ep, state, now, result, quiet)

        if not firing:
            if not eligible:
                continue
            # A new episode starts with the reopening finding; the first with the opening.
            started = inc.opened_at if inc.reopen_count == 0 else inc.last_seen_at
            if behind_failing_switch:
                result.inhibited += 1
                continue
            if target.inhibit and (now - started).total_seconds() < target.group_wait_s:
                result.held += 1
                continue
            event = _snapshot(inc, started, target.context, effect_lines)
            outbox.enqueue(session, name, "trigger", event, now)
            result.triggered += 1
            if target.acknowledge and event.acknowledged:  # acknowledged before it was paged
                outbox.enqueue(session, name, "refresh", event, now)
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
        current = _snapshot(inc, state.started_at, target.context, effect_lines)
        if current.labels() != sent.labels():
            if target.refresh_s is not None:
                # Alertmanager knows alerts by label set: retire the old set, post the new one.
                outbox.enqueue(session, name, "resolve", _resolve_of(sent, inc, now), now)
                outbox.enqueue(session, name, "trigger", current, now)
                result.resolved += 1
                result.triggered += 1
            elif (
                not muted
                and not behind_failing_switch
                and SEVERITY_RANK.get(current.severity, 0) > SEVERITY_RANK.get(sent.severity, 0)
            ):
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
        if target.acknowledge and current.acknowledged and not sent.acknowledged:
            # An operator acknowledged it (POST /api/v1/incidents/{id}/ack): tell the receiver
            # once; the acknowledged snapshot in alert_state says it was told.
            outbox.enqueue(session, name, "refresh", current, now)
            state.event = current.to_dict()
            state.last_enqueued_at = now

    if target.max_pending is not None:
        for (reason, severity), n in outbox.enforce_limit(session, name, target.max_pending, now).items():
            result.dropped[(name, reason, severity)] += n
