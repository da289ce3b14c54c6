"""Incidents, the findings behind them, and episodes that were stored only once over."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from graywire.detectors.findings import SEVERITIES, Severity
from graywire.service.models.base import Base, FindingId, in_check

IncidentStatus = Literal["open", "acknowledged", "resolved"]
FindingStatus = Literal["firing", "cleared"]

INCIDENT_STATUSES: tuple[IncidentStatus, ...] = ("open", "acknowledged", "resolved")
ACTIVE_STATUSES: tuple[IncidentStatus, ...] = ("open", "acknowledged")
FINDING_STATUSES: tuple[FindingStatus, ...] = ("firing", "cleared")


class Incident(Base):
    """A gray failure on one entity, deduplicated by ``(kind, entity)`` across polls.

    The incident outlives the findings that feed it: it is updated while its detector keeps
    firing, resolved when the detector clears, and reopened (not duplicated) if it comes back.
    """

    __tablename__ = "incidents"
    __table_args__ = (
        sa.Index("ix_incidents_kind_entity", "kind", "entity"),
        sa.CheckConstraint(in_check("status", INCIDENT_STATUSES), name="status"),
        sa.CheckConstraint(in_check("severity", SEVERITIES), name="severity"),
    )

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    status: Mapped[IncidentStatus] = mapped_column(sa.String(16), index=True)
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    node: Mapped[str | None] = mapped_column(sa.String, index=True)
    port: Mapped[str | None] = mapped_column(sa.String)
    link: Mapped[str | None] = mapped_column(sa.String)
    summary: Mapped[str] = mapped_column(sa.Text)
    detector: Mapped[str] = mapped_column(sa.String)
    score: Mapped[float] = mapped_column(sa.Float)
    confidence: Mapped[float] = mapped_column(sa.Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    opened_at: Mapped[datetime] = mapped_column(index=True)
    last_seen_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    finding_count: Mapped[int] = mapped_column(sa.Integer, default=0, server_default=sa.text("0"))
    reopen_count: Mapped[int] = mapped_column(sa.Integer, default=0, server_default=sa.text("0"))
    #: The active incident that explains this one (a bad link under a slow NCCL rank, a failing
    #: switch under its links): that one is paged, this one folds under it. Cleared when the
    #: cause resolves; kept when this one resolves, as the record of what it was. No foreign
    #: key: adding one would make SQLite rebuild the table, cascading deletes to findings.
    caused_by: Mapped[int | None] = mapped_column(sa.Integer, index=True)
    cause_reason: Mapped[str | None] = mapped_column(sa.Text)

    def __repr__(self) -> str:
        return f"Incident(id={self.id!r}, kind={self.kind!r}, entity={self.entity!r}, status={self.status!r})"


class FindingRecord(Base):
    """One finding as a detector emitted it; append-only, the audit trail behind an incident.

    ``incident_id`` is null for a ``cleared`` finding that had no open incident to close.
    """

    __tablename__ = "findings"
    __table_args__ = (
        sa.Index("ix_findings_incident_id_time", "incident_id", "time"),
        sa.CheckConstraint(in_check("status", FINDING_STATUSES), name="status"),
        sa.CheckConstraint(in_check("severity", SEVERITIES), name="severity"),
    )

    id: Mapped[int] = mapped_column(FindingId, primary_key=True)
    incident_id: Mapped[int | None] = mapped_column(sa.ForeignKey("incidents.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    status: Mapped[FindingStatus] = mapped_column(sa.String(16))
    time: Mapped[datetime] = mapped_column(index=True)
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    summary: Mapped[str] = mapped_column(sa.Text)
    detector: Mapped[str] = mapped_column(sa.String)
    node: Mapped[str | None] = mapped_column(sa.String)
    port: Mapped[str | None] = mapped_column(sa.String)
    link: Mapped[str | None] = mapped_column(sa.String)
    score: Mapped[float] = mapped_column(sa.Float)
    confidence: Mapped[float] = mapped_column(sa.Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)

    def __repr__(self) -> str:
        return (
            f"FindingRecord(id={self.id!r}, kind={self.kind!r}, entity={self.entity!r}, "
            f"status={self.status!r})"
        )


class LateEpisode(Base):
    """An incident episode (opened, then resolved) that reached the database only once it was over.

    Its findings waited outside while the database was unavailable, so nobody could be told
    of it while it lasted, and it is stored already resolved. The alert sync follows incidents
    that are active or that some receiver believes firing; this row is how it learns of an
    episode that was neither, and pages it late. ``incident`` is the incident as it stood when
    the episode ended (a later reopening in the same batch changes the incident itself).
    """

    __tablename__ = "late_episodes"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(sa.ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    #: The incident's ``reopen_count`` during the episode.
    episode: Mapped[int] = mapped_column(sa.Integer)
    fired_at: Mapped[datetime]
    cleared_at: Mapped[datetime]
    #: When storing findings first failed, and when they were stored at last.
    unstored_since: Mapped[datetime]
    stored_at: Mapped[datetime] = mapped_column(index=True)
    incident: Mapped[dict[str, Any]] = mapped_column(default=dict)
