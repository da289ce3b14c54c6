"""The audit log: every decision, the policy's or an operator's, with the evidence behind it.

Rows are only ever inserted (the database refuses UPDATE and DELETE on ``audit_log``), and
always in the same transaction as the change they describe, so a crash can lose neither
without the other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from graywire.service.models import AuditEntry, row_to_dict, to_jsonable

#: Actor name of decisions the drain policy takes by itself.
POLICY_ACTOR = "policy"


def record(
    session: Session,
    *,
    time: datetime,
    actor: str,
    action: str,
    message: str,
    node: str | None = None,
    incident_id: int | None = None,
    evidence: dict[str, Any] | None = None,
) -> None:
    """Append one audit row inside the caller's transaction."""
    session.add(
        AuditEntry(
            time=time,
            actor=actor,
            action=action,
            node=node,
            incident_id=incident_id,
            message=message,
            evidence=to_jsonable(evidence or {}),
        )
    )


def list_audit(
    session: Session,
    *,
    node: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    incident_id: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """Audit rows newest first, filtered; ``since`` inclusive, ``until`` exclusive."""
    query = sa.select(AuditEntry)
    for column, value in (
        (AuditEntry.node, node),
        (AuditEntry.action, action),
        (AuditEntry.actor, actor),
        (AuditEntry.incident_id, incident_id),
    ):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(AuditEntry.time >= since)
    if until is not None:
        query = query.where(AuditEntry.time < until)
    query = query.order_by(AuditEntry.time.desc(), AuditEntry.id.desc()).limit(limit).offset(offset)
    return [row_to_dict(e) for e in session.scalars(query)]
