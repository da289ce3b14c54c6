"""Drain policy state: inventory, node verdicts, drain recommendations, silences, the exclude
list, the append-only audit log and the fleet-wide drain state row.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out, not imported from service.models: this file describes the schema as of this revision.
SEVERITY_CHECK = "severity IN ('info', 'warning', 'critical')"
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)
APPEND_ONLY = "audit_log is append-only: rows cannot be updated or deleted"


def upgrade() -> None:
    op.create_table(
        "inventory_nodes",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("ports", sa.Integer(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_inventory_nodes")),
    )
    op.create_table(
        "node_verdicts",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("side", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("incident_ids", sa.JSON(), nullable=False),
        sa.Column("blamed_switch", sa.String(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.CheckConstraint("side IN ('host', 'link', 'network')", name=op.f("ck_node_verdicts_side")),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_node_verdicts")),
    )
    op.create_table(
        "drain_recommendations",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("since", TS, nullable=False),
        sa.Column("incident_ids", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("shadow", sa.Boolean(), nullable=False),
        sa.Column("decided_at", TS, nullable=False),
        sa.Column("clean_since", TS, nullable=True),
        sa.Column("released_at", TS, nullable=True),
        sa.CheckConstraint(
            "action IN ('drain', 'watch', 'none')", name=op.f("ck_drain_recommendations_action")
        ),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_drain_recommendations")),
    )
    op.create_index(op.f("ix_drain_recommendations_action"), "drain_recommendations", ["action"])
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("entity", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
    )
    op.create_index("ix_silences_kind_entity", "silences", ["kind", "entity"])
    op.create_index(op.f("ix_silences_expires_at"), "silences", ["expires_at"])
    op.create_table(
        "drain_excludes",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_drain_excludes")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("time", TS, nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_action_time", "audit_log", ["action", "time"])
    op.create_index(op.f("ix_audit_log_time"), "audit_log", ["time"])
    op.create_index(op.f("ix_audit_log_node"), "audit_log", ["node"])
    _append_only_triggers()

    state = op.create_table(
        "drain_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("breaker_tripped", sa.Boolean(), nullable=False),
        sa.Column("breaker_since", TS, nullable=True),
        sa.Column("breaker_message", sa.Text(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drain_state")),
    )
    # The one row every policy run locks; it must exist before the first run.
    now = datetime.now(UTC)
    if op.get_bind().dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # stored as UTC text without offset, as the models do
    op.bulk_insert(
        state,
        [
            {
                "id": 1,
                "breaker_tripped": False,
                "breaker_since": None,
                "breaker_message": "",
                "updated_at": now,
            }
        ],
    )


def _append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION graywire_audit_append_only() RETURNS trigger"
            f" LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log"
            " FOR EACH ROW EXECUTE FUNCTION graywire_audit_append_only()"
        )
    elif op.get_bind().dialect.name == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_log_no_{event.lower()} BEFORE {event} ON audit_log"
                f" BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"
            )


def downgrade() -> None:
    op.drop_table("drain_state")
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION IF EXISTS graywire_audit_append_only()")
    elif dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_delete")
    op.drop_index(op.f("ix_audit_log_node"), table_name="audit_log")
    op.drop_index(op.f("ix_audit_log_time"), table_name="audit_log")
    op.drop_index("ix_audit_log_action_time", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("drain_excludes")
    op.drop_index(op.f("ix_silences_expires_at"), table_name="silences")
    op.drop_index("ix_silences_kind_entity", table_name="silences")
    op.drop_table("silences")
    op.drop_index(op.f("ix_drain_recommendations_action"), table_name="drain_recommendations")
    op.drop_table("drain_recommendations")
    op.drop_table("node_verdicts")
    op.drop_table("inventory_nodes")
