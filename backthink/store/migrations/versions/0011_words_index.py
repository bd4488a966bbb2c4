"""Recall's words index: latin words and CJK 2-grams, beside the trigram index.

On SQLite each of `memory` and `message` gets a contentless FTS5 table
(`*_words`, unicode61) of its texts' latin words and CJK runs as
overlapping 2-grams, so recall can match a two-character Chinese word and a
latin word by its stem. The rows already stored are indexed here. On
PostgreSQL a SQL function `backthink_words(text)` makes the same words of a
text, and each table gets a GIN index over them.

The statements and the text transform are written out in this revision (not
imported), so it builds the same schema whatever later code does; a test
keeps the statements identical to `backthink.store.fulltext`.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:30:00+00:00
"""

from __future__ import annotations

import re

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

_INDEXED = ("memory", "message")
_BATCH = 2000
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_TOKEN = re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+")
_CJK_CLASS = "[\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uac00-\\ud7af\\uf900-\\ufaff]"
_PG_FUNCTION = (
    "CREATE FUNCTION backthink_words(t text) RETURNS text"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$"
    f" SELECT regexp_replace(t, '({_CJK_CLASS}+)', ' \\1 ', 'g') || ' '"
    " || coalesce((SELECT string_agg(substr(r[1], i, 2), ' ')"
    f" FROM regexp_matches(t, '({_CJK_CLASS}{{2,}})', 'g') AS r,"
    " generate_series(1, char_length(r[1]) - 1) AS i), '')"
    " $$"
)
_PG_WORDS = "to_tsvector('simple'::regconfig, backthink_words(text))"


def _words(text: str) -> str:
    tokens: list[str] = []
    for run in _TOKEN.findall(text):
        if _CJK_RUN.match(run):
            tokens += [run[i : i + 2] for i in range(len(run) - 1)]
        else:
            tokens.append(run)
    return " ".join(tokens)


def upgrade() -> None:
    """Add the words indexes (indexing every row on SQLite)."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        for table in _INDEXED:
            op.execute(f"CREATE INDEX ix_{table}_text_words ON {table} USING gin (({_PG_WORDS}))")
        return
    if bind.dialect.name != "sqlite":
        return
    for table in _INDEXED:
        op.execute(
            f"CREATE VIRTUAL TABLE {table}_words USING fts5("
            "text, content='', tokenize='unicode61 remove_diacritics 0')"
        )
        since = 0
        while True:
            found = bind.exec_driver_sql(
                f"SELECT id, text FROM {table} WHERE id > ? ORDER BY id LIMIT ?", (since, _BATCH)
            ).all()
            if not found:
                break
            bind.exec_driver_sql(
                f"INSERT INTO {table}_words(rowid, text) VALUES (?, ?)",
                [(int(i), _words(str(t))) for i, t in found],
            )
            since = int(found[-1][0])


def downgrade() -> None:
    """Remove the words indexes."""
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for table in _INDEXED:
            op.drop_index(f"ix_{table}_text_words", table_name=table)
        op.execute("DROP FUNCTION backthink_words(text)")
    if dialect == "sqlite":
        for table in _INDEXED:
            op.execute(f"DROP TABLE {table}_words")
