"""The API's doors: a chat app's own message ids, and the owners' bearer tokens.

`message.client_id` is the id a chat app gave a message; it is unique per
owner, so a message sent twice is stored once. `api_token` keeps the SHA-256
digest of every token `backthink owners token ID` printed, never the token.

Revision ID: 0013
Revises: 0010
Create Date: 2026-12-03 09:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add message.client_id with its unique index, and the api_token table."""
    with op.batch_alter_table("message") as batch:
        batch.add_column(sa.Column("client_id", sa.String(), nullable=True))
    where = sa.text("client_id IS NOT NULL")
    op.create_index(
        "ix_message_client",
        "message",
        ["owner_id", "client_id"],
        unique=True,
        sqlite_where=where,
        postgresql_where=where,
    )
    op.create_table(
        "api_token",
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_api_token")),
    )
    op.create_index("ix_api_token_owner", "api_token", ["owner_id"])


def downgrade() -> None:
    """Drop the api_token table and message.client_id."""
    op.drop_index("ix_api_token_owner", table_name="api_token")
    op.drop_table("api_token")
    op.drop_index("ix_message_client", table_name="message")
    with op.batch_alter_table("message") as batch:
        batch.drop_column("client_id")
