"""The round record keeps the tool calls of its round.

`round.tools` is a JSON list of `{name, ok, ms, args_chars}`: the name as
offered, whether the call worked, its duration and the size of its arguments,
never the arguments or the result. Rows from before tools have an empty list.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 01:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add round.tools, an empty list on every existing row."""
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("tools", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    """Drop round.tools."""
    with op.batch_alter_table("round") as batch:
        batch.drop_column("tools")
