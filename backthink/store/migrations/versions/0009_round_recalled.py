"""The round record names the memories and messages its prompt showed.

`round.recalled` is a JSON list of `{kind, id}`: `thought` and `memory` are
rows of the memory table, `message` a main-session message. Ids only, never
the text, so a memory forgotten later is gone from the record as well. Rows
from before have an empty list.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 05:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add round.recalled, an empty list on every existing row."""
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("recalled", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    """Drop round.recalled."""
    with op.batch_alter_table("round") as batch:
        batch.drop_column("recalled")
