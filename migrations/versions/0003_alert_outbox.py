"""Alerting outbox: messages per receiver and what each receiver was last told.

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_state",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("receiver", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.CheckConstraint("state IN ('firing', 'resolved')", name=op.f("ck_alert_state_state")),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incidents.id"],
            name=op.f("fk_alert_state_incident_id_incidents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("incident_id", "receiver", name=op.f("pk_alert_state")),
    )
    op.create_table(
        "alert_outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("receiver", sa.String(length=200), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "action IN ('trigger', 'refresh', 'resolve')", name=op.f("ck_alert_outbox_action")
        ),
        sa.CheckConstraint("status IN ('pending', 'delivered', 'dead')", name=op.f("ck_alert_outbox_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_outbox")),
    )
    op.create_index("ix_alert_outbox_receiver_status_id", "alert_outbox", ["receiver", "status", "id"])
    op.create_index(op.f("ix_alert_outbox_incident_id"), "alert_outbox", ["incident_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_outbox_incident_id"), table_name="alert_outbox")
    op.drop_index("ix_alert_outbox_receiver_status_id", table_name="alert_outbox")
    op.drop_table("alert_outbox")
    op.drop_table("alert_state")
