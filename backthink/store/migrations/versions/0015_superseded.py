"""A message knows its front-end chat, and whether an edit in that chat left it behind.

The relay keeps one conversation per front-end chat (`message.chat_id`: the
chat's own id, or one the relay gave it). An edit or a branch marks the
turns after the point where the chat departs from the session
`superseded`: kept, listed on request, never read by a round, recall, the
gate or a later relay turn. Existing rows belong to no chat and stand.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 10:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add message.chat_id (empty) and message.superseded (false on every existing row)."""
    with op.batch_alter_table("message") as batch:
        batch.add_column(sa.Column("chat_id", sa.String(), nullable=True))
        batch.add_column(
            sa.Column("superseded", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    """Drop message.superseded and message.chat_id."""
    with op.batch_alter_table("message") as batch:
        batch.drop_column("superseded")
        batch.drop_column("chat_id")
