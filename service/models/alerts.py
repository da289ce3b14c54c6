"""Tables of the alerting outbox.

``alert_state`` remembers, per incident and receiver, what was last enqueued; ``alert_outbox``
holds each message until its receiver accepted it. Both are written in the same transaction by
the sync step, so a crash can neither lose an event nor enqueue it twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from graywire.service.models.base import Base, FindingId, in_check

AlertAction = Literal["trigger", "refresh", "resolve"]
OutboxStatus = Literal["pending", "delivered", "dead"]
AlertStateName = Literal["firing", "resolved"]

ALERT_ACTIONS: tuple[AlertAction, ...] = ("trigger", "refresh", "resolve")
OUTBOX_STATUSES: tuple[OutboxStatus, ...] = ("pending", "delivered", "dead")
ALERT_STATES: tuple[AlertStateName, ...] = ("firing", "resolved")


class AlertState(Base):
    """What a receiver was last told about an incident (one row per incident and receiver).

    ``episode`` is the incident's ``reopen_count`` when it was triggered: a reopened incident
    is a new episode and is triggered again, under the same dedup key.
    """

    __tablename__ = "alert_state"
    __table_args__ = (sa.CheckConstraint(in_check("state", ALERT_STATES), name="state"),)

    incident_id: Mapped[int] = mapped_column(
        sa.ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True
    )
    receiver: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    state: Mapped[AlertStateName] = mapped_column(sa.String(16))
    episode: Mapped[int] = mapped_column(sa.Integer)
    started_at: Mapped[datetime]
    last_enqueued_at: Mapped[datetime]
    #: The event last enqueued: a resolve must carry the labels the trigger carried.
    event: Mapped[dict[str, Any]] = mapped_column(default=dict)


class OutboxMessage(Base):
    """One event for one receiver, kept until delivered (or refused for good).

    ``event`` is a receiver-independent snapshot of the incident; the payload is rendered at
    delivery time, so timestamps that must be fresh (Alertmanager's endsAt) are.
    """

    __tablename__ = "alert_outbox"
    __table_args__ = (
        sa.Index("ix_alert_outbox_receiver_status_id", "receiver", "status", "id"),
        sa.CheckConstraint(in_check("action", ALERT_ACTIONS), name="action"),
        sa.CheckConstraint(in_check("status", OUTBOX_STATUSES), name="status"),
    )

    id: Mapped[int] = mapped_column(FindingId, primary_key=True)
    receiver: Mapped[str] = mapped_column(sa.String(200))
    incident_id: Mapped[int] = mapped_column(sa.Integer, index=True)
    action: Mapped[AlertAction] = mapped_column(sa.String(16))
    status: Mapped[OutboxStatus] = mapped_column(sa.String(16), default="pending")
    event: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime]
    next_attempt_at: Mapped[datetime]
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0, server_default=sa.text("0"))
    #: A dispatcher holds the message until then; another one (a second replica) skips it.
    claimed_until: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)

    def __repr__(self) -> str:
        return (
            f"OutboxMessage(id={self.id!r}, receiver={self.receiver!r}, incident_id={self.incident_id!r}, "
            f"action={self.action!r}, status={self.status!r})"
        )
