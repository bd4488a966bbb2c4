"""A written-back message knows its round and whether its delivery failed.

A push whose delivery failed on every channel stays in the main session (it
still counts for duplicates and rate limits) but is marked undelivered, so the
next prompt does not show it as something the companion said.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 22:30:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add message.round_id, message.undelivered and ix_message_round."""
    with op.batch_alter_table("message") as batch:
        batch.add_column(sa.Column("round_id", sa.String(), nullable=True))
        batch.add_column(
            sa.Column("undelivered", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    where = sa.text("round_id IS NOT NULL")
    op.create_index(
        "ix_message_round", "message", ["round_id"], sqlite_where=where, postgresql_where=where
    )


def downgrade() -> None:
    """Remove message.round_id and message.undelivered."""
    op.drop_index("ix_message_round", table_name="message")
    with op.batch_alter_table("message") as batch:
        batch.drop_column("undelivered")
        batch.drop_column("round_id")
