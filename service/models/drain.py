"""The drain policy's tables: the fabric's nodes, verdicts, recommendations, operator
silences and exclusions, the audit log, and the one-row circuit-breaker state."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from graywire.detectors.findings import Severity
from graywire.service.models.base import Base, FindingId, in_check

DrainAction = Literal["drain", "watch", "none"]
VerdictSide = Literal["host", "link", "network"]
DRAIN_ACTIONS: tuple[DrainAction, ...] = ("drain", "watch", "none")
VERDICT_SIDES: tuple[VerdictSide, ...] = ("host", "link", "network")


class InventoryNode(Base):
    """A node of the fabric model (host, leaf, spine), refreshed from it at start-up.

    Kept in the database so decisions can be read back (and joined) without the model file,
    and so a node that left the model is still known by name in old audit rows.
    """

    __tablename__ = "inventory_nodes"

    name: Mapped[str] = mapped_column(sa.String, primary_key=True)
    role: Mapped[str] = mapped_column(sa.String(32))
    ports: Mapped[int] = mapped_column(sa.Integer)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class NodeVerdictRecord(Base):
    """The latest verdict on one node (host, link or network side), rewritten every poll."""

    __tablename__ = "node_verdicts"
    __table_args__ = (sa.CheckConstraint(in_check("side", VERDICT_SIDES), name="side"),)

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    role: Mapped[str] = mapped_column(sa.String(32))
    side: Mapped[VerdictSide] = mapped_column(sa.String(16))
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    reasons: Mapped[list[str]] = mapped_column(sa.JSON)
    incident_ids: Mapped[list[int]] = mapped_column(sa.JSON)
    blamed_switch: Mapped[str | None] = mapped_column(sa.String)
    updated_at: Mapped[datetime]


class DrainRecommendation(Base):
    """What the drain policy says about one node now; one row per node, never two.

    The node is the primary key, so a restarted service finds the drains it already made and
    cannot recommend the same node twice. ``action`` ``none`` keeps the row (and
    ``released_at``) after a return to service, for the cooldown.
    """

    __tablename__ = "drain_recommendations"
    __table_args__ = (sa.CheckConstraint(in_check("action", DRAIN_ACTIONS), name="action"),)

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    action: Mapped[DrainAction] = mapped_column(sa.String(16), index=True)
    reason: Mapped[str] = mapped_column(sa.Text)
    since: Mapped[datetime]
    incident_ids: Mapped[list[int]] = mapped_column(sa.JSON)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    shadow: Mapped[bool] = mapped_column(sa.Boolean)
    decided_at: Mapped[datetime]
    #: When the node stopped failing while drained; it returns after a clean window from here.
    clean_since: Mapped[datetime | None]
    #: When it last returned to service (by policy or by an operator); starts the cooldown.
    released_at: Mapped[datetime | None]


class Silence(Base):
    """Operator silence of one incident's ``(kind, entity)`` until ``expires_at``.

    A silenced incident counts toward no drain (and is for notifiers to mute); it keeps being
    tracked and updated like any other.
    """

    __tablename__ = "silences"
    __table_args__ = (sa.Index("ix_silences_kind_entity", "kind", "entity"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    reason: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[str] = mapped_column(sa.String)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class Exclusion(Base):
    """A node the drain policy must never drain (until ``expires_at``, if set)."""

    __tablename__ = "drain_excludes"

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    reason: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[str] = mapped_column(sa.String)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]


class AuditEntry(Base):
    """One decision (the policy's or an operator's) with the evidence it was taken on.

    Append-only: the migration installs triggers that refuse UPDATE and DELETE, so history
    cannot be rewritten through the database either.
    """

    __tablename__ = "audit_log"
    __table_args__ = (sa.Index("ix_audit_log_action_time", "action", "time"),)

    id: Mapped[int] = mapped_column(FindingId, primary_key=True)
    time: Mapped[datetime] = mapped_column(index=True)
    actor: Mapped[str] = mapped_column(sa.String)
    action: Mapped[str] = mapped_column(sa.String(64))
    node: Mapped[str | None] = mapped_column(sa.String, index=True)
    incident_id: Mapped[int | None] = mapped_column(sa.Integer)
    message: Mapped[str] = mapped_column(sa.Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DrainState(Base):
    """Fleet-wide drain state: one row (id 1), locked by every policy run.

    The lock serializes decisions across replicas sharing PostgreSQL, and the row carries
    the circuit breaker across restarts.
    """

    __tablename__ = "drain_state"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    breaker_tripped: Mapped[bool] = mapped_column(sa.Boolean)
    breaker_since: Mapped[datetime | None]
    breaker_message: Mapped[str] = mapped_column(sa.Text)
    updated_at: Mapped[datetime]
