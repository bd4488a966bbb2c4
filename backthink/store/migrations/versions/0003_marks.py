"""Add the mark table: per-owner timestamps the daemon keeps across restarts.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 07:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create the mark table."""
    op.create_table(
        "mark",
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "name", name=op.f("pk_mark")),
    )


def downgrade() -> None:
    """Drop the mark table."""
    op.drop_table("mark")
