"""The outbox row names its round's trigger instead of carrying a copy of the round.

A delivery resumed after a crash is recorded from its own row (the round id is
its id); the trigger is the one fact about the round the row did not hold. The
created_at index serves the start-up search for deliveries left unrecorded.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 22:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Replace delivery.round_record by delivery.trigger; index delivery.created_at."""
    with op.batch_alter_table("delivery") as batch:
        batch.drop_column("round_record")
        batch.add_column(sa.Column("trigger", sa.String(), nullable=True))
    op.create_index("ix_delivery_created", "delivery", ["created_at"])


def downgrade() -> None:
    """Restore delivery.round_record (empty) and drop delivery.trigger and its index."""
    op.drop_index("ix_delivery_created", table_name="delivery")
    with op.batch_alter_table("delivery") as batch:
        batch.drop_column("trigger")
        batch.add_column(sa.Column("round_record", sa.Text(), nullable=True))
