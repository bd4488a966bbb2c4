"""Full-text indexes over `memory.text` and `message.text` (SQLite FTS5, trigram), kept by us.

Each index is an external-content FTS5 table: it keeps only the trigram
index and reads the text from its table by rowid. The trigram tokenizer
needs no word list and serves Chinese and English alike, for terms of three
characters or more.

No trigger keeps the indexes current. The chat app writes `message` (and
may write `memory`) with whatever SQLite it has; a trigger needing the
trigram tokenizer would make its inserts fail on a SQLite without it. The
daemon indexes instead (`catch_up`): rows are indexed in id order, so the
highest indexed rowid is the cursor, read from the index's own `_docsize`
table (one row per indexed document). The cursor thus lives in the same
transaction as the index and can never disagree with it, and no schema
object exists beside the index's own.

What the cursor cannot see:

- A row the chat app edits or deletes keeps its old index entries until a
  'rebuild' (`INSERT INTO message_fts(message_fts) VALUES ('rebuild')`).
  Readers join the index with the table and re-check the current text, so
  a deleted row is never returned and an edited one only for what it now
  says.
- SQLite may give a new row the id of a deleted newest row. If that id was
  indexed already, the new text is not indexed (until a rebuild); its old
  entries match nothing the new text holds, once re-checked.

`forget` removes a memory's entries itself ('delete' with the old text).
A `*_fts_vocab` table beside each index exposes per-term document counts.

Recall reads a second index per table, the words index (`*_words`): a
contentless FTS5 table (unicode61) of what `terms.index_text` makes of each
text, its latin words and its CJK runs as overlapping 2-grams. The trigram
index cannot match a two-character Chinese word (胃镜, 面试); this one can,
and matches a latin stem as a word's prefix. It keeps no text: a row's
entries are deleted with the words of the text it was indexed with. Both
indexes are caught up together; a table's cursor is the lower of theirs.

On PostgreSQL none of this exists: each `text` column gets a pg_trgm GIN
index instead (`PG_FULLTEXT_DDL`), and a GIN index over the words
`backthink_words(text)` makes of it (the same words and 2-grams, in SQL),
which PostgreSQL keeps current in every writer's transaction, the chat
app's too (see `backthink.store.pg_recall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from backthink.memory.terms import index_text

INDEXED = ("memory", "message")
"""The tables whose `text` column has a full-text index."""

CATCH_UP_ROWS = 500
"""Rows one catch-up transaction indexes at most (about 10 ms of work), so none stalls a round."""


def _ddl(table: str) -> list[str]:
    fts = f"{table}_fts"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5("
        f"text, content='{table}', content_rowid='id', tokenize='trigram')",
        f"CREATE VIRTUAL TABLE {fts}_vocab USING fts5vocab({fts}, row)",
    ]


def _words_ddl(table: str) -> str:
    return (
        f"CREATE VIRTUAL TABLE {table}_words USING fts5("
        "text, content='', tokenize='unicode61 remove_diacritics 0')"
    )


FULLTEXT_DDL: tuple[str, ...] = tuple(
    sql for table in INDEXED for sql in (*_ddl(table), _words_ddl(table))
)
"""The statements that create every index, its vocabulary table and its words index."""

WORDS_BATCH = 2000
"""Rows read at a time when a words index is filled whole."""


_CJK_CLASS = "[\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uac00-\\ud7af\\uf900-\\ufaff]"

PG_WORDS_FUNCTION = (
    "CREATE FUNCTION backthink_words(t text) RETURNS text"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$"
    f" SELECT regexp_replace(t, '({_CJK_CLASS}+)', ' \\1 ', 'g') || ' '"
    " || coalesce((SELECT string_agg(substr(r[1], i, 2), ' ')"
    f" FROM regexp_matches(t, '({_CJK_CLASS}{{2,}})', 'g') AS r,"
    " generate_series(1, char_length(r[1]) - 1) AS i), '')"
    " $$"
)
"""The words of a text as PostgreSQL indexes them: the text, then its CJK runs as 2-grams."""

PG_WORDS = "to_tsvector('simple'::regconfig, backthink_words(text))"
"""The indexed expression; a query must spell it the same to use the index."""

PG_FULLTEXT_DDL: tuple[str, ...] = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    *(f"CREATE INDEX ix_{t}_text_trgm ON {t} USING gin (text gin_trgm_ops)" for t in INDEXED),
    PG_WORDS_FUNCTION,
    *(f"CREATE INDEX ix_{t}_text_words ON {t} USING gin (({PG_WORDS}))" for t in INDEXED),
)
"""PostgreSQL's equivalent: per table a trigram GIN index, serving ILIKE on any substring,
and a GIN index of its words, serving recall."""

PG_FULLTEXT_INDEXES = frozenset(f"ix_{t}_text_trgm" for t in INDEXED)
PG_WORDS_INDEXES = frozenset(f"ix_{t}_text_words" for t in INDEXED)


def create_fulltext(connection: Connection) -> None:
    """Create the full-text indexes and index the rows already there.

    SQLite gets the FTS5 tables, PostgreSQL the trigram indexes; other
    databases nothing. A revision that adds an index runs the same
    statements, so a new database and a migrated one are identical.
    """
    if connection.dialect.name == "postgresql":
        for sql in PG_FULLTEXT_DDL:
            connection.exec_driver_sql(sql)
        return
    if connection.dialect.name != "sqlite":
        return
    for sql in FULLTEXT_DDL:
        connection.exec_driver_sql(sql)
    for table in INDEXED:
        connection.exec_driver_sql(f"INSERT INTO {table}_fts({table}_fts) VALUES ('rebuild')")
        fill_words(connection, table)


def fill_words(connection: Connection, table: str, *, since: int = 0) -> None:
    """Index in the words index every row of `table` past id `since`, batch by batch."""
    while True:
        found = connection.exec_driver_sql(
            f"SELECT id, text FROM {table} WHERE id > ? ORDER BY id LIMIT ?",
            (since, WORDS_BATCH),
        ).all()
        if not found:
            return
        _index_words(connection, table, found)
        since = int(found[-1][0])


def _index_words(connection: Connection, table: str, rows: Sequence[Any]) -> None:
    connection.exec_driver_sql(
        f"INSERT INTO {table}_words(rowid, text) VALUES (?, ?)",
        [(int(i), index_text(str(t))) for i, t in rows],
    )


def is_fulltext_table(name: str) -> bool:
    """Whether a table name belongs to a full-text index (the index, its shadows, its vocab)."""
    return any(name.startswith((f"{table}_fts", f"{table}_words")) for table in INDEXED)


def is_fulltext(name: str | None, type_: str) -> bool:
    """Whether a schema object is a full-text index, written by hand outside the metadata."""
    if name is None:
        return False
    return (type_ == "table" and is_fulltext_table(name)) or (
        type_ == "index" and name in PG_FULLTEXT_INDEXES | PG_WORDS_INDEXES
    )


def _cursor_sql(table: str) -> str:
    """The highest id both of a table's indexes hold."""
    return (
        f"min((SELECT coalesce(max(id), 0) FROM {table}_fts_docsize),"
        f" (SELECT coalesce(max(id), 0) FROM {table}_words_docsize))"
    )


TOPS_SQL = "SELECT " + ", ".join(
    f"(SELECT coalesce(max(id), 0) FROM {t}), {_cursor_sql(t)}" for t in INDEXED
)
"""One row: each indexed table's highest id, then the highest id both its indexes hold."""


def parse_tops(row: Sequence[Any]) -> dict[str, tuple[int, int]]:
    """A `TOPS_SQL` row as: per indexed table, (its highest id, the highest indexed id)."""
    return {t: (int(row[2 * i]), int(row[2 * i + 1])) for i, t in enumerate(INDEXED)}


def tops(connection: Connection) -> dict[str, tuple[int, int]]:
    """Per indexed table: (its highest id, the highest indexed id); 0 when empty."""
    return parse_tops(connection.exec_driver_sql(TOPS_SQL).one())


def catch_up(
    connection: Connection, table: str, since: int | None, *, rows: int = CATCH_UP_ROWS
) -> tuple[int, list[tuple[int, str]] | None]:
    """Index up to `rows` rows of `table` past the cursor; run it in a write transaction.

    The insert comes first, so the transaction holds the write lock before it
    reads the cursor, and two indexers never index a row twice.

    Args:
        connection: a connection inside a write transaction.
        table: one of `INDEXED`.
        since: the cursor the caller's term counts stand at (None: it keeps none).
        rows: the most rows to index.

    Returns:
        The cursor now, and the (id, text) of every row indexed since `since`
        (by this call or by another process), oldest first; None instead of
        the rows when there are more than `rows` of them or the cursor went
        back (a forget, a rebuild): counts taken at `since` are then stale.
    """
    fts = f"{table}_fts"
    connection.exec_driver_sql(
        f"INSERT INTO {fts}(rowid, text) SELECT id, text FROM {table}"
        f" WHERE id > (SELECT coalesce(max(id), 0) FROM {fts}_docsize) ORDER BY id LIMIT ?",
        (rows,),
    )
    found = connection.exec_driver_sql(
        f"SELECT id, text FROM {table} WHERE id > (SELECT coalesce(max(id), 0)"
        f" FROM {table}_words_docsize) ORDER BY id LIMIT ?",
        (rows,),
    ).all()
    if found:
        _index_words(connection, table, found)
    return indexed_since(connection, table, since, rows=rows)


def indexed_since(
    connection: Connection, table: str, since: int | None, *, rows: int = CATCH_UP_ROWS
) -> tuple[int, list[tuple[int, str]] | None]:
    """The cursor, and the rows indexed past `since` (None: too many, it went back, or no since)."""
    cursor = int(connection.exec_driver_sql(f"SELECT {_cursor_sql(table)}").scalar_one())
    if since is None or cursor < since:
        return cursor, None
    if cursor == since:
        return cursor, []
    found = connection.exec_driver_sql(
        f"SELECT id, text FROM {table} WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (since, cursor, rows + 1),
    ).all()
    if len(found) > rows:
        return cursor, None
    return cursor, [(int(i), str(t)) for i, t in found]


def unindex(connection: Connection, table: str, row_id: int, text: str) -> None:
    """Remove one row's entries from its indexes, where indexed; `text` is what was indexed."""
    for index, body in ((f"{table}_fts", text), (f"{table}_words", index_text(text))):
        indexed = connection.exec_driver_sql(
            f"SELECT 1 FROM {index}_docsize WHERE id = ?", (row_id,)
        ).first()
        if indexed is not None:
            connection.exec_driver_sql(
                f"INSERT INTO {index}({index}, rowid, text) VALUES ('delete', ?, ?)",
                (row_id, body),
            )


def optimize(connection: Connection, table: str) -> None:
    """Merge each of a table's indexes into one segment, leaving out deleted entries."""
    for index in (f"{table}_fts", f"{table}_words"):
        connection.exec_driver_sql(f"INSERT INTO {index}({index}) VALUES ('optimize')")
