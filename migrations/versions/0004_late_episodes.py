"""Incident episodes stored only after they ended (the database was unavailable meanwhile).

Revision ID: 0004
Revises: 0003
Create Date: 2025-04-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "late_episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("fired_at", TS, nullable=False),
        sa.Column("cleared_at", TS, nullable=False),
        sa.Column("unstored_since", TS, nullable=False),
        sa.Column("stored_at", TS, nullable=False),
        sa.Column("incident", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incidents.id"],
            name=op.f("fk_late_episodes_incident_id_incidents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_late_episodes")),
    )
    op.create_index(op.f("ix_late_episodes_incident_id"), "late_episodes", ["incident_id"])
    op.create_index(op.f("ix_late_episodes_stored_at"), "late_episodes", ["stored_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_late_episodes_stored_at"), table_name="late_episodes")
    op.drop_index(op.f("ix_late_episodes_incident_id"), table_name="late_episodes")
    op.drop_table("late_episodes")
