"""Index messages by role, so the owner's newest messages are found directly.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 09:20:00+00:00
"""

from __future__ import annotations

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ix_message_role."""
    op.create_index(
        "ix_message_role", "message", ["owner_id", "session_id", "role", "created_at", "id"]
    )


def downgrade() -> None:
    """Remove ix_message_role."""
    op.drop_index("ix_message_role", table_name="message")
