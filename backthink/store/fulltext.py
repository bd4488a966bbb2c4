"""SQLite full-text indexes over `memory.text` and `message.text` (FTS5, trigram).

Each index is an external-content FTS5 table: it keeps only the trigram
index, reads the text from its table by rowid, and is kept current by
triggers. Triggers are plain SQL, so rows the chat app writes are indexed
too, with no indexer process. The trigram tokenizer needs no word list and
serves Chinese and English alike, for terms of three characters or more.

A `*_fts_vocab` table beside each index exposes per-term document counts
(recall weighs terms by them). On other databases none of this exists and
recall scans with LIKE instead.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

INDEXED = ("memory", "message")
"""The tables whose `text` column has a full-text index."""


def _ddl(table: str) -> list[str]:
    fts = f"{table}_fts"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5("
        f"text, content='{table}', content_rowid='id', tokenize='trigram')",
        f"CREATE VIRTUAL TABLE {fts}_vocab USING fts5vocab({fts}, row)",
        f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, text) VALUES (new.id, new.text); END",
        f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, text) VALUES ('delete', old.id, old.text); END",
        f"CREATE TRIGGER {fts}_au AFTER UPDATE OF text ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, text) VALUES ('delete', old.id, old.text); "
        f"INSERT INTO {fts}(rowid, text) VALUES (new.id, new.text); END",
    ]


FULLTEXT_DDL: tuple[str, ...] = tuple(sql for table in INDEXED for sql in _ddl(table))
"""The statements that create every index, its vocabulary table and its triggers."""


def create_fulltext(connection: Connection) -> None:
    """Create the full-text indexes on a SQLite database and index the rows already there.

    Does nothing on other databases. A revision that adds an index runs the
    same statements, so a new database and a migrated one are identical.
    """
    if connection.dialect.name != "sqlite":
        return
    for sql in FULLTEXT_DDL:
        connection.exec_driver_sql(sql)
    for table in INDEXED:
        connection.exec_driver_sql(f"INSERT INTO {table}_fts({table}_fts) VALUES ('rebuild')")


def is_fulltext_table(name: str) -> bool:
    """Whether a table name belongs to a full-text index (the index, its shadows, its vocab)."""
    return any(name.startswith(f"{table}_fts") for table in INDEXED)
