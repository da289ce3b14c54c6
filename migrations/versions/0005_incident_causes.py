"""Root causes: an incident may be the effect of another, which is paged in its stead.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain columns, no foreign key: SQLite would rebuild the table for one, and dropping the
    # old table cascades its deletes to the findings.
    op.add_column("incidents", sa.Column("caused_by", sa.Integer(), nullable=True))
    op.add_column("incidents", sa.Column("cause_reason", sa.Text(), nullable=True))
    op.create_index(op.f("ix_incidents_caused_by"), "incidents", ["caused_by"])


def downgrade() -> None:
    op.drop_index(op.f("ix_incidents_caused_by"), table_name="incidents")
    # Dropped in place (SQLite 3.35+ can): a batch rebuild would cascade-delete the findings.
    op.drop_column("incidents", "cause_reason")
    op.drop_column("incidents", "caused_by")
