"""Create the message, round and delivery tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 00:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create the three tables and their indexes."""
    op.create_table(
        "message",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("image", sa.Text(), nullable=True),
        sa.Column("speaker", sa.String(), nullable=True),
        sa.Column("channel", sa.String(), nullable=True),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message")),
        sa.CheckConstraint("origin IN ('chat', 'proactive')", name=op.f("ck_message_origin")),
    )
    op.create_index("ix_message_recent", "message", ["owner_id", "session_id", "created_at", "id"])
    op.create_table(
        "round",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("trigger", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("push", sa.Boolean(), nullable=True),
        sa.Column("urgency", sa.String(), nullable=True),
        sa.Column("decided_channel", sa.String(), nullable=True),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("channel", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("raw_reply", sa.Text(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_round")),
    )
    op.create_index("ix_round_owner_started", "round", ["owner_id", "started_at"])
    op.create_table(
        "delivery",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("channel", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery")),
        sa.CheckConstraint(
            "status IN ('pending', 'sent', 'failed')", name=op.f("ck_delivery_status")
        ),
    )


def downgrade() -> None:
    """Drop everything this revision created."""
    op.drop_table("delivery")
    op.drop_index("ix_round_owner_started", table_name="round")
    op.drop_table("round")
    op.drop_index("ix_message_recent", table_name="message")
    op.drop_table("message")
