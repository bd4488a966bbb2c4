"""Owners live in the database: the owner table.

One row per owner: name, time zone, language, persona prompt file, state
file, per-owner channel and gate overrides (JSON), enabled, who manages the
row (`config` or `cli`), and the distributed worker's schedule (next_due_at,
greeted_at).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 05:30:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create the owner table and its due index."""
    op.create_table(
        "owner",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("timezone", sa.String(), nullable=False),
        sa.Column("language", sa.String(), nullable=True),
        sa.Column("persona", sa.Text(), nullable=True),
        sa.Column("state_file", sa.Text(), nullable=True),
        sa.Column("channels", sa.Text(), nullable=False),
        sa.Column("gate", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("greeted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("source IN ('config', 'cli')", name=op.f("ck_owner_source")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_owner")),
    )
    op.create_index("ix_owner_due", "owner", ["enabled", "next_due_at"])


def downgrade() -> None:
    """Drop the owner table."""
    op.drop_index("ix_owner_due", table_name="owner")
    op.drop_table("owner")
