"""The round names the tools it offered; a memory says whether it carries outside text.

`round.offered` is a JSON list of the tool names a round offered, as
offered (`cal__agenda`): the page shows them from the record instead of
starting the MCP servers again. Rows from before have an empty list.

`memory.untrusted` is true for a kept thought that quotes outside text (the
owner's messages, memories, the state file, tool results, as the round's
request held them): the echo guard treats such a thought as the outside
text it carries. Rows from before are false.

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-03 10:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add round.offered (an empty list) and memory.untrusted (false) on every existing row."""
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("offered", sa.Text(), nullable=False, server_default="[]"))
    with op.batch_alter_table("memory") as batch:
        batch.add_column(
            sa.Column("untrusted", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    """Drop round.offered and memory.untrusted."""
    with op.batch_alter_table("memory") as batch:
        batch.drop_column("untrusted")
    with op.batch_alter_table("round") as batch:
        batch.drop_column("offered")
