"""Runs the drain policy against the database after every poll, and reads its results back.

One run is one transaction: it locks the fleet-wide ``drain_state`` row (so replicas sharing
PostgreSQL decide one at a time and the circuit breaker counts every drain), reads the open
incidents, silences, exclusions and current recommendations, applies ``graywire.service.drain_policy``
and writes the recommendations, the node verdicts, the breaker and an audit row per change
together. Killed at any point, the database holds either all of a run or none of it; the
next run recomputes from what is stored, so a node already drained is never drained again.

The network incidents (one per failing switch) and the breaker's alert go through the
incident store afterwards, as findings of the ``drain_policy`` detector: that is the path
the alerting pipeline already reads. They are idempotent, so a crash between the two
transactions only delays them by one poll.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from graywire.collectors.model import Fabric
from graywire.detectors.correlate import node_verdicts, root_causes
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.service.audit import POLICY_ACTOR, record
from graywire.service.config import DrainSettings
from graywire.service.drain_policy import Breaker, Current, DrainPolicy, PolicyResult, decide
from graywire.service.models import (
    ACTIVE_STATUSES,
    AuditEntry,
    DrainRecommendation,
    DrainState,
    Exclusion,
    Incident,
    InventoryNode,
    NodeVerdictRecord,
    Silence,
    row_to_dict,
)
from graywire.service.models.engine import SQLITE_BEGIN_IMMEDIATE
from graywire.service.store import IncidentStore

log = logging.getLogger("graywire.drain")

DETECTOR = "drain_policy/1"
#: One incident per switch that fails as a whole (links to 3+ of its hosts bad at once).
NETWORK_KIND = Kind.SWITCH_FAILURE
BREAKER_KIND = Kind.DRAIN_CIRCUIT_BREAKER
BREAKER_ENTITY = "fabric"
#: Incidents the policy raises itself; never input to a verdict.
OWN_KINDS = frozenset({NETWORK_KIND, BREAKER_KIND})
STATE_ID = 1


def policy_from_settings(s: DrainSettings) -> DrainPolicy:
    return DrainPolicy(
        shadow=s.shadow,
        max_fraction=s.max_fraction,
        window=s.window,
        clean_window=s.clean_window,
        cooldown=s.cooldown,
        min_severity=s.min_severity,
        trust_pushed=s.trust_pushed,
        min_nodes=s.min_nodes,
        max_nodes=s.max_nodes,
    )


def utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


@dataclass(frozen=True, slots=True)
class BreakerView:
    tripped: bool
    since: datetime | None
    message: str
    recent_drains: int
    cap: int


class DrainEngine:
    """The drain policy over one database and one fabric model."""

    def __init__(
        self,
        engine: Engine,
        store: IncidentStore,
        fabric: Fabric,
        policy: DrainPolicy,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.store = store
        self.fabric = fabric
        self.policy = policy
        self.clock = clock
        self.hosts = sum(1 for r in fabric.node_roles if r == "host")
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextlib.contextmanager
    def writing(self) -> Iterator[Session]:
        """A transaction holding the write lock from its start (SQLite ``BEGIN IMMEDIATE``)."""
        with self._sessions.begin() as session:
            session.connection(execution_options={SQLITE_BEGIN_IMMEDIATE: True})
            yield session

    # -- inventory --------------------------------------------------------------------------
    def sync_inventory(self) -> None:
        """Record the fabric model's nodes (new ones added, known ones touched)."""
        now = self.clock()
        per_node = np.bincount(self.fabric.node_of_port, minlength=len(self.fabric.node_names))
        ports = dict(zip(self.fabric.node_names, per_node.tolist(), strict=True))
        with self.writing() as session:
            known = {n.name: n for n in session.scalars(sa.select(InventoryNode))}
            for name, role in zip(self.fabric.node_names, self.fabric.node_roles, strict=True):
                row = known.get(name)
                if row is None:
                    session.add(
                        InventoryNode(
                            name=name, role=role, ports=ports.get(name, 0), first_seen=now, last_seen=now
                        )
                    )
                else:
                    row.role, row.ports, row.last_seen = role, ports.get(name, 0), now

    # -- one run ----------------------------------------------------------------------------
    def evaluate(self) -> PolicyResult:
        """Decide and persist; then raise or clear the network and breaker incidents."""
        now = self.clock()
        with self.writing() as session:
            state = session.scalars(
                sa.select(DrainState).where(DrainState.id == STATE_ID).with_for_update()
            ).one()
            active = [
                row_to_dict(i)
                for i in session.scalars(sa.select(Incident).where(Incident.status.in_(ACTIVE_STATUSES)))
            ]
            own = {(i["kind"], i["entity"]): i for i in active if i["kind"] in OWN_KINDS}
            silenced = {
                (s.kind, s.entity)
                for s in session.scalars(sa.select(Silence).where(Silence.expires_at > now))
            }
            inputs = [
                i for i in active if i["kind"] not in OWN_KINDS and (i["kind"], i["entity"]) not in silenced
            ]
            by_id = {i["id"]: i for i in inputs}
            verdicts = node_verdicts(inputs, self.fabric)
            excluded = {
                e.node: f"by {e.created_by} until {_iso(e.expires_at) or 'removed'}: {e.reason}"
                for e in session.scalars(
                    sa.select(Exclusion).where(
                        sa.or_(Exclusion.expires_at.is_(None), Exclusion.expires_at > now)
                    )
                )
            }
            rows = {r.node: r for r in session.scalars(sa.select(DrainRecommendation))}
            current = {
                r.node: Current(
                    r.node,
                    r.action,
                    r.since,
                    r.reason,
                    tuple(r.incident_ids),
                    r.clean_since,
                    r.released_at,
                    r.shadow,
                )
                for r in rows.values()
            }
            recent = self._recent_drains(session, now)
            breaker = Breaker(state.breaker_tripped, state.breaker_since, recent, state.breaker_message)
            result = decide(verdicts, by_id, current, excluded, breaker, self.hosts, self.policy, now)
            self._write_decisions(session, result, rows, now)
            self._write_verdicts(session, verdicts, now)
            if result.tripped_now:
                state.breaker_tripped = True
                state.breaker_since = now
                state.breaker_message = result.breaker_message
                state.updated_at = now
                record(
                    session,
                    time=now,
                    actor=POLICY_ACTOR,
                    action="breaker_trip",
                    message=result.breaker_message,
                    evidence={
                        "recent_drains": result.recent_drains,
                        "cap": result.cap,
                        "hosts": self.hosts,
                        "max_fraction": self.policy.max_fraction,
                    },
                )
                log.error("%s", result.breaker_message)
            tripped, breaker_message = state.breaker_tripped, state.breaker_message
        self._raise_own_incidents(result, own, tripped, breaker_message, now)
        self.link_causes()
        return result

    def link_causes(self) -> dict[int, int]:
        """Record each active incident's root cause (``caused_by``), and clear causes that
        resolved (an operator's resolve, too); after the switch incidents are raised, so a switch
        can be a cause. Returns effect id -> cause id."""
        with self.writing() as session:
            return self.link_causes_in(session)

    def link_causes_in(self, session: Session) -> dict[int, int]:
        """``link_causes`` inside a caller's transaction: the store's, as it writes findings, so
        an effect is never committed without its cause."""
        rows = list(session.scalars(sa.select(Incident).where(Incident.status.in_(ACTIVE_STATUSES))))
        causes = root_causes((row_to_dict(r) for r in rows), self.fabric, frozenset({NETWORK_KIND}))
        for row in rows:
            cause = causes.get(row.id)
            cid, why = (cause.incident_id, cause.reason) if cause else (None, None)
            if row.caused_by != cid:
                if cid is not None:
                    log.info("incident %d (%s %s) is an effect of incident %d: %s",
                             row.id, row.kind, row.entity, cid, why)  # fmt: skip
                row.caused_by, row.cause_reason = cid, why
            elif row.cause_reason != why:
                row.cause_reason = why
        return {e: c.incident_id for e, c in causes.items()}

    def _recent_drains(self, session: Session, now: datetime) -> int:
        """Drains inside the window, counted from the audit log (so a restart resets nothing).

        An operator's breaker reset starts the count afresh: the drains that tripped it were
        judged, and counting them again would trip the breaker on the very next poll.
        """
        start = now - self.policy.window
        last_reset = session.scalar(
            sa.select(sa.func.max(AuditEntry.time)).where(AuditEntry.action == "breaker_reset")
        )
        if last_reset is not None:
            # An aggregate loses the column type on SQLite: parse and tag it as UTC.
            if not isinstance(last_reset, datetime):
                last_reset = datetime.fromisoformat(str(last_reset))
            last_reset = last_reset.replace(tzinfo=UTC) if last_reset.tzinfo is None else last_reset
            start = max(start, last_reset)
        return int(
            session.scalar(
                sa.select(sa.func.count())
                .select_from(AuditEntry)
                .where(AuditEntry.action == "drain", AuditEntry.time > start)
            )
            or 0
        )

    def _write_decisions(
        self, session: Session, result: PolicyResult, rows: dict[str, DrainRecommendation], now: datetime
    ) -> None:
        shadow = self.policy.shadow
        for d in result.decisions:
            row = rows.get(d.node)
            if row is None:
                row = DrainRecommendation(node=d.node, decided_at=now)
                session.add(row)
            if d.event is not None:
                row.decided_at = now
            row.action = d.action
            row.reason = d.reason
            row.since = d.since
            row.incident_ids = d.incident_ids
            if d.evidence or d.event is not None:
                row.evidence = d.evidence
            row.shadow = shadow
            row.clean_since = d.clean_since
            row.released_at = d.released_at
            if d.event is not None:
                mode = " (shadow mode: recommended, not acted on)" if shadow and d.action == "drain" else ""
                record(
                    session,
                    time=now,
                    actor=POLICY_ACTOR,
                    action=d.event,
                    node=d.node,
                    message=f"{d.action}: {d.reason}{mode}",
                    evidence={
                        "incident_ids": d.incident_ids,
                        "since": d.since,
                        "shadow": shadow,
                        **d.evidence,
                    },
                )
                log.info("drain policy: %s %s: %s", d.event, d.node, d.reason)

    @staticmethod
    def _write_verdicts(session: Session, verdicts: list[Any], now: datetime) -> None:
        session.execute(sa.delete(NodeVerdictRecord))
        for v in verdicts:
            d = v.as_dict()
            session.add(
                NodeVerdictRecord(
                    node=d["node"],
                    role=d["role"],
                    side=d["side"],
                    severity=d["severity"],
                    reasons=d["reasons"],
                    incident_ids=d["incident_ids"],
                    blamed_switch=d["blamed_switch"],
                    updated_at=now,
                )
            )

    def _raise_own_incidents(
        self,
        result: PolicyResult,
        own: dict[tuple[str, str], dict[str, Any]],
        tripped: bool,
        breaker_message: str,
        now: datetime,
    ) -> None:
        findings: list[Finding] = []
        for switch, (hosts, ids) in sorted(result.network.items()):
            existing = own.get((NETWORK_KIND, switch))
            if existing is not None and existing["evidence"].get("hosts") == hosts:
                continue
            shown = ", ".join(hosts[:8]) + (", …" if len(hosts) > 8 else "")
            findings.append(
                Finding(
                    kind=NETWORK_KIND,
                    entity=switch,
                    status="firing",
                    time=now,
                    severity=Severity.CRITICAL,
                    summary=(
                        f"{switch} is failing as a whole: links to {len(hosts)} hosts are bad at once "
                        f"({shown}); one network incident, the hosts are not drained"
                    ),
                    detector=DETECTOR,
                    node=switch,
                    score=float(len(hosts)),
                    evidence={"hosts": hosts, "incident_ids": ids},
                )
            )
        for (kind, entity), inc in own.items():
            if kind == NETWORK_KIND and entity not in result.network:
                findings.append(
                    Finding(
                        kind=kind,
                        entity=entity,
                        status="cleared",
                        time=now,
                        severity=inc["severity"],
                        summary=f"{entity} no longer fails as a whole",
                        detector=DETECTOR,
                        node=entity,
                    )
                )
        breaker_open = (BREAKER_KIND, BREAKER_ENTITY) in own
        if tripped and not breaker_open:
            findings.append(
                Finding(
                    kind=BREAKER_KIND,
                    entity=BREAKER_ENTITY,
                    status="firing",
                    time=now,
                    # In shadow mode nothing was acted on: visible, but below the default paging floor.
                    severity=Severity.INFO if self.policy.shadow else Severity.CRITICAL,
                    summary=breaker_message
                    + (" (shadow mode: nothing was acted on)" if self.policy.shadow else ""),
                    detector=DETECTOR,
                    evidence={
                        "recent_drains": result.recent_drains,
                        "cap": result.cap,
                        "max_fraction": self.policy.max_fraction,
                        "window_seconds": int(self.policy.window.total_seconds()),
                    },
                )
            )
        elif not tripped and breaker_open:
            findings.append(
                Finding(
                    kind=BREAKER_KIND,
                    entity=BREAKER_ENTITY,
                    status="cleared",
                    time=now,
                    severity=Severity.CRITICAL,
                    summary="drain circuit breaker reset",
                    detector=DETECTOR,
                )
            )
        if findings:
            self.store.apply(findings)  # evaluate links causes next, the switch incidents among them

    # -- reads ------------------------------------------------------------------------------
    def list_drain(self, action: str | None = None) -> list[dict[str, Any]]:
        """The drain list (actions drain and watch), oldest first; the API serves it flat."""
        query = sa.select(DrainRecommendation).where(DrainRecommendation.action.in_(("drain", "watch")))
        if action is not None:
            query = query.where(DrainRecommendation.action == action)
        query = query.order_by(DrainRecommendation.since, DrainRecommendation.node)
        with self._sessions() as session:
            return [recommendation_to_dict(r, self.policy.shadow) for r in session.scalars(query)]

    def recommendation(self, node: str) -> dict[str, Any] | None:
        with self._sessions() as session:
            row = session.get(DrainRecommendation, node)
            return None if row is None else recommendation_to_dict(row, self.policy.shadow)

    def breaker(self) -> BreakerView:
        now = self.clock()
        with self._sessions() as session:
            state = session.get(DrainState, STATE_ID)
            assert state is not None, "drain_state row missing: run `graywire db upgrade`"
            recent = self._recent_drains(session, now)
        return BreakerView(
            state.breaker_tripped,
            state.breaker_since,
            state.breaker_message,
            recent,
            self.policy.cap(self.hosts),
        )

    def counts(self) -> dict[str, int]:
        """Nodes per action in the drain list, for the Prometheus gauges."""
        query = (
            sa.select(DrainRecommendation.action, sa.func.count())
            .where(DrainRecommendation.action.in_(("drain", "watch")))
            .group_by(DrainRecommendation.action)
        )
        out = {"drain": 0, "watch": 0}
        with self._sessions() as session:
            out.update({a: int(n) for a, n in session.execute(query)})
        return out


def recommendation_to_dict(row: DrainRecommendation, shadow_mode: bool = False) -> dict[str, Any]:
    """A row as the API serves it. Under shadow mode every item is shadow, even one stored
    live before a restart switched the mode and before the first run rewrote it."""
    return {
        "node": row.node,
        "action": row.action,
        "reason": row.reason,
        "since": row.since.isoformat(),
        "incident_ids": list(row.incident_ids),
        "evidence_url": f"/api/v1/nodes/{row.node}",
        "shadow": row.shadow or shadow_mode,
    }
