"""Incidents and the findings behind them.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out rather than imported from service.models: a migration must keep describing the schema
# as it was at this revision, whatever the models become later.
SEVERITY_CHECK = "severity IN ('info', 'warning', 'critical')"


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("entity", sa.String(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("port", sa.String(), nullable=True),
        sa.Column("link", sa.String(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("detector", sa.String(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finding_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("reopen_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "status IN ('open', 'acknowledged', 'resolved')", name=op.f("ck_incidents_status")
        ),
        sa.CheckConstraint(SEVERITY_CHECK, name=op.f("ck_incidents_severity")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
    )
    op.create_index("ix_incidents_kind_entity", "incidents", ["kind", "entity"])
    op.create_index(op.f("ix_incidents_status"), "incidents", ["status"])
    op.create_index(op.f("ix_incidents_node"), "incidents", ["node"])
    op.create_index(op.f("ix_incidents_opened_at"), "incidents", ["opened_at"])

    op.create_table(
        "findings",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("entity", sa.String(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("detector", sa.String(), nullable=False),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("port", sa.String(), nullable=True),
        sa.Column("link", sa.String(), nullable=True),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.CheckConstraint("status IN ('firing', 'cleared')", name=op.f("ck_findings_status")),
        sa.CheckConstraint(SEVERITY_CHECK, name=op.f("ck_findings_severity")),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incidents.id"],
            name=op.f("fk_findings_incident_id_incidents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    op.create_index("ix_findings_incident_id_time", "findings", ["incident_id", "time"])
    op.create_index(op.f("ix_findings_time"), "findings", ["time"])


def downgrade() -> None:
    op.drop_index(op.f("ix_findings_time"), table_name="findings")
    op.drop_index("ix_findings_incident_id_time", table_name="findings")
    op.drop_table("findings")
    op.drop_index(op.f("ix_incidents_opened_at"), table_name="incidents")
    op.drop_index(op.f("ix_incidents_node"), table_name="incidents")
    op.drop_index(op.f("ix_incidents_status"), table_name="incidents")
    op.drop_index("ix_incidents_kind_entity", table_name="incidents")
    op.drop_table("incidents")
