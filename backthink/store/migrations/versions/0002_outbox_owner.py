"""Give the outbox its owner and the round it completes; index proactive messages.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 06:30:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add delivery.owner_id and delivery.round_record, and two indexes."""
    with op.batch_alter_table("delivery") as batch:
        # Rows written before this revision belong to the default owner.
        batch.add_column(
            sa.Column("owner_id", sa.String(), nullable=False, server_default="default")
        )
        batch.add_column(sa.Column("round_record", sa.Text(), nullable=True))
    op.create_index("ix_delivery_status_next", "delivery", ["status", "next_attempt_at"])
    op.create_index(
        "ix_message_origin", "message", ["owner_id", "session_id", "origin", "created_at", "id"]
    )


def downgrade() -> None:
    """Remove what upgrade added."""
    op.drop_index("ix_message_origin", table_name="message")
    op.drop_index("ix_delivery_status_next", table_name="delivery")
    with op.batch_alter_table("delivery") as batch:
        batch.drop_column("round_record")
        batch.drop_column("owner_id")
