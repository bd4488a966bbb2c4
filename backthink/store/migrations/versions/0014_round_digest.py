"""The round record keeps the digest of what its request said.

`round.digest` is set on rounds that called the model: a hash of the
window's messages, the state, the journal and recalled ids, the part of the
owner's day and the local date. A heartbeat whose digest equals that of the
last silent round is skipped (`skipped/unchanged`). Rows from before have
none, so the first heartbeat after the upgrade asks the model.

Revision ID: 0014
Revises: 0010
Create Date: 2026-12-03 10:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add round.digest, empty on every existing row."""
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("digest", sa.String(), nullable=True))


def downgrade() -> None:
    """Drop round.digest."""
    with op.batch_alter_table("round") as batch:
        batch.drop_column("digest")
