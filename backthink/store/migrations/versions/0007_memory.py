"""Long-term memory: the memory table, and full-text indexes over memories and messages.

On SQLite both `memory.text` and `message.text` get an external-content FTS5
trigram index. No trigger keeps them current (the chat app's SQLite may lack
the trigram tokenizer, and a trigger needing it would fail its inserts): the
daemon indexes new rows itself, past the highest indexed rowid, which the
index's `_docsize` table holds (see `backthink.store.fulltext`). The rows
already stored are indexed here ('rebuild'), which also sets that cursor.
On PostgreSQL each `text` column gets a pg_trgm GIN index instead, which
PostgreSQL keeps current in every writer's transaction.

The statements are written out in this revision (not imported), so the
revision builds the same schema whatever later code does; a test keeps them
identical to `backthink.store.fulltext`.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 23:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_INDEXED = ("memory", "message")


def _ddl(table: str) -> list[str]:
    fts = f"{table}_fts"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5("
        f"text, content='{table}', content_rowid='id', tokenize='trigram')",
        f"CREATE VIRTUAL TABLE {fts}_vocab USING fts5vocab({fts}, row)",
    ]


_PG_DDL = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    *(f"CREATE INDEX ix_{t}_text_trgm ON {t} USING gin (text gin_trgm_ops)" for t in _INDEXED),
)


def upgrade() -> None:
    """Add the memory table and the full-text indexes (indexing every message)."""
    op.create_table(
        "memory",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("round_id", sa.String(), nullable=True),
        sa.CheckConstraint("kind IN ('note', 'profile', 'thought')", name=op.f("ck_memory_kind")),
        sa.PrimaryKeyConstraint("id", name="pk_memory"),
    )
    op.create_index("ix_memory_recent", "memory", ["owner_id", "kind", "created_at", "id"])
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for sql in _PG_DDL:
            op.execute(sql)
        return
    if dialect != "sqlite":
        return
    for table in _INDEXED:
        for sql in _ddl(table):
            op.execute(sql)
        op.execute(f"INSERT INTO {table}_fts({table}_fts) VALUES ('rebuild')")


def downgrade() -> None:
    """Remove the full-text indexes and the memory table (pg_trgm stays: others may use it)."""
    if op.get_bind().dialect.name == "postgresql":
        for table in _INDEXED:
            op.drop_index(f"ix_{table}_text_trgm", table_name=table)
    if op.get_bind().dialect.name == "sqlite":
        for table in _INDEXED:
            op.execute(f"DROP TABLE {table}_fts_vocab")
            op.execute(f"DROP TABLE {table}_fts")
    op.drop_index("ix_memory_recent", table_name="memory")
    op.drop_table("memory")
