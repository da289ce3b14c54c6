"""Replicas: membership, the decision leader's lease, and the fence on every deciding table.

On PostgreSQL a statement trigger on each table that holds a decision (incidents and their
findings, verdicts, drains, silences, exclusions, the audit log, the alert state and outbox)
refuses a write whose transaction carries a fencing token other than the lease's, and a
write that carries none while a leader's lease is live. SQLite has no replicas, so no fence.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)

#: Every table whose rows are decisions (service/cluster/fence.py names the same list).
FENCED = (
    "incidents", "findings", "late_episodes", "node_verdicts", "drain_recommendations",
    "drain_state", "drain_excludes", "silences", "audit_log", "alert_state", "alert_outbox",
)  # fmt: skip

# The transaction's token is the setting graywire.fence (set_config(..., true): this
# transaction only). 'migration' lets a schema migration through. The lease row is read FOR
# KEY SHARE, so a takeover (which changes the token, a key) waits until this transaction ends.
FENCE_FUNCTION = """
CREATE OR REPLACE FUNCTION graywire_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    given text := nullif(current_setting('graywire.fence', true), '');
    lease record;
BEGIN
    IF given = 'migration' THEN
        RETURN NULL;
    END IF;
    SELECT holder, token, expires_at > clock_timestamp() AS live INTO lease
        FROM cluster_leader WHERE id = 1 FOR KEY SHARE;
    IF given IS NULL THEN
        IF FOUND AND lease.live THEN
            RAISE EXCEPTION USING ERRCODE = 'GW001', MESSAGE = format(
                'graywire fence: write to %s refused: member %s leads this database '
                '(fencing token %s) and this writer holds no token',
                TG_TABLE_NAME, lease.holder, lease.token);
        END IF;
        RETURN NULL;
    END IF;
    IF NOT FOUND OR lease.token <> given::bigint THEN
        RAISE EXCEPTION USING ERRCODE = 'GW001', MESSAGE = format(
            'graywire fence: write to %s refused: stale fencing token %s (the lease is at %s, held by %s)',
            TG_TABLE_NAME, given, coalesce(lease.token::text, 'none'), coalesce(lease.holder, 'nobody'));
    END IF;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "cluster_members",
        sa.Column("member_id", sa.String(length=200), nullable=False),
        sa.Column("incarnation", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=False),
        sa.Column("lead", sa.Boolean(), nullable=False),
        sa.Column("collect", sa.Boolean(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("member_id", name=op.f("pk_cluster_members")),
    )
    op.create_index(op.f("ix_cluster_members_heartbeat_at"), "cluster_members", ["heartbeat_at"])
    op.create_table(
        "cluster_leader",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_leader")),
        sa.UniqueConstraint("token", name=op.f("uq_cluster_leader_token")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FENCE_FUNCTION)
        for table in FENCED:
            op.execute(
                f"CREATE TRIGGER {table}_fence BEFORE INSERT OR UPDATE OR DELETE ON {table}"
                " FOR EACH STATEMENT EXECUTE FUNCTION graywire_fence()"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in FENCED:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_fence ON {table}")
        op.execute("DROP FUNCTION IF EXISTS graywire_fence()")
    op.drop_table("cluster_leader")
    op.drop_index(op.f("ix_cluster_members_heartbeat_at"), table_name="cluster_members")
    op.drop_table("cluster_members")
