"""Operator actions: acknowledge, resolve, silence, exclude, undrain, reset the breaker.

Each action changes state and appends its audit row in one transaction, naming the operator
(the token's name) and the reason given. Actions that make no sense for the current state
(resolving a resolved incident, undraining a node that is not drained) raise ``Conflict``
rather than writing a misleading audit row.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from graywire.detectors.findings import Finding, Severity
from graywire.service.audit import list_audit, record
from graywire.service.drain_engine import BREAKER_ENTITY, BREAKER_KIND, DETECTOR, STATE_ID, DrainEngine
from graywire.service.models import DrainRecommendation, DrainState, Exclusion, Incident, Silence, row_to_dict


class NotFound(LookupError):
    """The named incident or node does not exist."""


class Conflict(ValueError):
    """The action does not apply to the current state (e.g. resolving a resolved incident)."""


class Operations:
    def __init__(self, drain: DrainEngine) -> None:
        self.drain = drain
        self._sessions = drain._sessions

    def _incident(self, session: Session, incident_id: int) -> Incident:
        incident = session.scalars(
            sa.select(Incident).where(Incident.id == incident_id).with_for_update()
        ).first()
        if incident is None:
            raise NotFound(f"incident {incident_id} not found")
        return incident

    # -- incidents --------------------------------------------------------------------------
    def acknowledge(self, incident_id: int, actor: str, comment: str = "") -> dict[str, Any]:
        now = self.drain.clock()
        with self.drain.writing() as session:
            inc = self._incident(session, incident_id)
            if inc.status == "resolved":
                raise Conflict(
                    f"incident {incident_id} is resolved; only an open incident can be acknowledged"
                )
            if inc.status == "open":
                inc.status = "acknowledged"
                record(
                    session,
                    time=now,
                    actor=actor,
                    action="acknowledge",
                    node=inc.node,
                    incident_id=inc.id,
                    message=f"acknowledged {inc.kind} on {inc.entity}: {comment}".rstrip(": "),
                    evidence={"summary": inc.summary},
                )
            return row_to_dict(inc)

    def resolve(self, incident_id: int, actor: str, comment: str = "") -> dict[str, Any]:
        now = self.drain.clock()
        with self.drain.writing() as session:
            inc = self._incident(session, incident_id)
            if inc.status == "resolved":
                raise Conflict(f"incident {incident_id} is already resolved")
            inc.status = "resolved"
            inc.resolved_at = max(now, inc.last_seen_at)
            record(
                session,
                time=now,
                actor=actor,
                action="resolve",
                node=inc.node,
                incident_id=inc.id,
                message=f"resolved {inc.kind} on {inc.entity} by hand: {comment}".rstrip(": "),
                evidence={"summary": inc.summary},
            )
            return row_to_dict(inc)

    def silence(self, incident_id: int, duration: timedelta, actor: str, reason: str) -> dict[str, Any]:
        now = self.drain.clock()
        with self.drain.writing() as session:
            inc = self._incident(session, incident_id)
            s = Silence(
                kind=inc.kind,
                entity=inc.entity,
                reason=reason,
                created_by=actor,
                created_at=now,
                expires_at=now + duration,
            )
            session.add(s)
            session.flush()
            record(
                session,
                time=now,
                actor=actor,
                action="silence",
                node=inc.node,
                incident_id=inc.id,
                message=f"silenced {inc.kind} on {inc.entity} until {s.expires_at.isoformat()}: {reason}",
                evidence={"silence_id": s.id},
            )
            return row_to_dict(s)

    def list_silences(self, active_only: bool = True) -> list[dict[str, Any]]:
        query = sa.select(Silence).order_by(Silence.expires_at.desc(), Silence.id.desc())
        if active_only:
            query = query.where(Silence.expires_at > self.drain.clock())
        with self._sessions() as session:
            return [row_to_dict(s) for s in session.scalars(query)]

    # -- nodes ------------------------------------------------------------------------------
    def exclude(self, node: str, duration: timedelta | None, actor: str, reason: str) -> dict[str, Any]:
        now = self.drain.clock()
        expires = now + duration if duration is not None else None
        with self.drain.writing() as session:
            row = session.get(Exclusion, node)
            if row is None:
                row = Exclusion(node=node)
                session.add(row)
            row.reason, row.created_by, row.created_at, row.expires_at = reason, actor, now, expires
            until = expires.isoformat() if expires else "removed"
            record(
                session,
                time=now,
                actor=actor,
                action="exclude",
                node=node,
                message=f"excluded {node} from drains until {until}: {reason}",
            )
            return row_to_dict(row)

    def unexclude(self, node: str, actor: str, reason: str = "") -> None:
        now = self.drain.clock()
        with self.drain.writing() as session:
            row = session.get(Exclusion, node)
            if row is None:
                raise NotFound(f"node {node} is not on the exclude list")
            session.delete(row)
            record(
                session,
                time=now,
                actor=actor,
                action="unexclude",
                node=node,
                message=f"removed {node} from the exclude list: {reason}".rstrip(": "),
            )

    def list_excludes(self) -> list[dict[str, Any]]:
        now = self.drain.clock()
        query = (
            sa.select(Exclusion)
            .where(sa.or_(Exclusion.expires_at.is_(None), Exclusion.expires_at > now))
            .order_by(Exclusion.node)
        )
        with self._sessions() as session:
            return [row_to_dict(e) for e in session.scalars(query)]

    def undrain(self, node: str, actor: str, reason: str) -> dict[str, Any]:
        """Return a node to service by hand; the cooldown keeps it from being drained at once again."""
        now = self.drain.clock()
        with self.drain.writing() as session:
            row = session.get(DrainRecommendation, node, with_for_update=True)
            if row is None or row.action == "none":
                raise Conflict(f"node {node} is not on the drain list")
            previous = row.action
            row.action, row.released_at, row.clean_since, row.decided_at = "none", now, None, now
            row.reason = f"returned to service by {actor}: {reason}"
            record(
                session,
                time=now,
                actor=actor,
                action="undrain",
                node=node,
                message=f"{previous} -> none by hand: {reason}",
                evidence={"incident_ids": list(row.incident_ids)},
            )
            return {
                "node": node,
                "action": "none",
                "previous_action": previous,
                "released_at": now.isoformat(),
            }

    # -- breaker ----------------------------------------------------------------------------
    def reset_breaker(self, actor: str, reason: str) -> None:
        now = self.drain.clock()
        with self.drain.writing() as session:
            state = session.get(DrainState, STATE_ID, with_for_update=True)
            assert state is not None
            if not state.breaker_tripped:
                raise Conflict("the drain circuit breaker is not tripped")
            state.breaker_tripped, state.breaker_since, state.updated_at = False, None, now
            state.breaker_message = f"reset by {actor} at {now.isoformat()}: {reason}"
            record(session, time=now, actor=actor, action="breaker_reset", message=state.breaker_message)
        self.drain.store.apply(
            [
                Finding(
                    kind=BREAKER_KIND,
                    entity=BREAKER_ENTITY,
                    status="cleared",
                    time=now,
                    severity=Severity.CRITICAL,
                    summary=f"drain circuit breaker reset by {actor}",
                    detector=DETECTOR,
                )
            ]
        )

    # -- audit ------------------------------------------------------------------------------
    def audit(self, **filters: Any) -> list[dict[str, Any]]:
        with self._sessions() as session:
            return list_audit(session, **filters)
