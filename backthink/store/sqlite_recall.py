"""Recall on SQLite: the FTS5 words indexes as a recall source, and what a result stands on.

`SqlMemoryStore.recall` catches the indexes up and keeps the results by
window signature; `recall_once` runs the pipeline (`backthink.memory.pipeline`)
over `SqliteSource`: the document counts of the window's terms (`Counts`,
cached per index), the rows each words index finds for a term, the rows an
owner may recall among them, and the neighbours of the best matched messages.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from backthink.memory import pipeline
from backthink.memory.pipeline import Documents, Query, Side
from backthink.memory.scoring import DF_CAP, Candidate
from backthink.memory.terms import term_query
from backthink.models import Recalled
from backthink.store.fulltext import catch_up as catch_up_index
from backthink.store.fulltext import indexed_since, tops
from backthink.store.recall_rows import neighbours, visible
from backthink.store.term_counts import TermCounts

COUNT_CHUNK = 16
"""Terms counted per statement (a handful of statement shapes, each prepared once)."""
HIT_TERMS = 8
"""Terms read per hits statement (recall queries `TERMS` at most)."""


def dbapi_rows(conn: Connection, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
    """Run one read on the DB-API connection itself, outside any transaction.

    Recall's hot reads go this way: SQLAlchemy's statement handling and its
    BEGIN/ROLLBACK pair cost twice what the query does (measured: 0.35 ms
    against 0.17 ms for the index tops). Each statement reads its own
    snapshot, which these reads allow: what one finds, the next re-checks.
    """
    dbapi = conn.connection.dbapi_connection
    if dbapi is None:
        raise RuntimeError("the connection is closed")
    cursor = dbapi.cursor()
    try:
        cursor.execute(sql, tuple(params))
        return builtins.list(cursor.fetchall())
    finally:
        cursor.close()


def _count_sql(fts: str, n: int) -> str:
    one = f"(SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT ?))"
    return "SELECT " + ", ".join([one] * n)


def _hits_sql(fts: str, first: int, n: int, *, below: bool) -> str:
    """The rowids of `n` terms in one words index, each after its index in the terms."""
    under = " AND rowid < ?" if below else ""
    return " UNION ALL ".join(
        f"SELECT {i}, rowid FROM {fts} WHERE {fts} MATCH ?{under}" for i in range(first, first + n)
    )


class Counts(TermCounts):
    """Term counts of one words index; its cursor (highest indexed rowid) is the mark.

    A count is read with a MATCH that stops past `DF_CAP` rows, so a common
    term costs no more than a rare one.
    """

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.fts = f"{table}_words"

    def sync(self, conn: Connection, cursor: int) -> None:
        """Bring the counts to the index's cursor, reading the rows indexed since `mark`."""
        if cursor == self.mark:
            return
        if self.mark < 0:
            self.clear(cursor)
            return
        now, found = indexed_since(conn, self.table, self.mark)
        self.advance(self.mark, now, found)

    def read(self, conn: Connection, terms: Iterable[str]) -> dict[str, int]:
        """Document counts of the terms (0 when absent; past DF_CAP, DF_CAP + 1 or more)."""
        missing = self.missing(terms)
        for start in range(0, len(missing), COUNT_CHUNK):
            chunk = missing[start : start + COUNT_CHUNK]
            params: builtins.list[Any] = []
            for term in chunk:
                params += [term_query(term), DF_CAP + 1]
            (counts,) = dbapi_rows(conn, _count_sql(self.fts, len(chunk)), params)
            for term, count in zip(chunk, counts, strict=True):
                self.store(term, int(count))
        return self.df


class SqliteSource:
    """A `RecallSource` over the FTS5 words indexes, on one read connection.

    The counts stand at the indexes' cursors as `recall_once` read them;
    the texts of every row it hands out are kept (`texts`), for the result
    to check later that they still read so.
    """

    def __init__(
        self, conn: Connection, counts: dict[str, Counts], cursors: Mapping[str, int]
    ) -> None:
        """Read on `conn`, with the term `counts`, brought to the index `cursors`."""
        self._conn = conn
        self._counts = counts
        self._cursors = Documents(cursors["memory"], cursors["message"])
        for table, cursor in cursors.items():
            counts[table].sync(conn, cursor)
        self.texts: dict[tuple[str, int], str] = {}

    def documents(self) -> Documents:
        """The highest indexed id of each side (see `RecallSource.documents`)."""
        return self._cursors

    def counts(self, side: Side, terms: Collection[str]) -> Mapping[str, int]:
        """Rows of a side's words index holding each term (see `RecallSource.counts`)."""
        return self._counts[side].read(self._conn, terms)

    def hits(
        self, side: Side, terms: Sequence[str], *, owner_id: str, before: int | None
    ) -> Iterable[tuple[int, int]]:
        """Each term's rowids in the side's words index, every owner's (see `RecallSource.hits`).

        The index keeps no owner: the owner's rows are picked by `rows`, from
        the few ids the pipeline reads.
        """
        found: builtins.list[tuple[int, int]] = []
        for start in range(0, len(terms), HIT_TERMS):
            chunk = terms[start : start + HIT_TERMS]
            params: builtins.list[Any] = []
            for term in chunk:
                params += [term_query(term), *([before] if before is not None else [])]
            sql = _hits_sql(f"{side}_words", start, len(chunk), below=before is not None)
            found += dbapi_rows(self._conn, sql, params)
        return found

    def rows(
        self, side: Side, ids: Sequence[int], *, owner_id: str, before: int | None
    ) -> Iterable[Candidate]:
        """The owner's rows among `ids` (see `RecallSource.rows`)."""
        return self._kept(visible(self._conn, side, ids, owner_id=owner_id, before=before))

    def neighbours(
        self, anchors: Sequence[int], *, owner_id: str, before: int
    ) -> Mapping[int, Sequence[Candidate]]:
        """The messages beside each anchor (see `RecallSource.neighbours`)."""
        near = neighbours(self._conn, anchors, owner_id=owner_id, before=before)
        for side in near.values():
            self._kept(side)
        return near

    def _kept(self, found: builtins.list[Candidate]) -> builtins.list[Candidate]:
        self.texts.update(((c.kind, c.id), c.text) for c in found)
        return found


Indexed = tuple[int, builtins.list[tuple[int, str]] | None]
"""A cursor, and the (id, text) of the rows indexed up to it (None: unknown)."""


def catch_up(
    conn: Connection, *, lagging: dict[str, int | None]
) -> tuple[dict[str, Indexed], dict[str, tuple[int, int]]]:
    """One catch-up batch of each lagging index (by the cursor its counts stand at); then `tops`."""
    moved = {t: catch_up_index(conn, t, since) for t, since in lagging.items()}
    return moved, tops(conn)


def lagging(tops: dict[str, tuple[int, int]], before: int | None) -> bool:
    """Whether a recall must wait for the indexes to catch up first.

    Memories must be indexed to be recalled. Messages only below the
    window: the newest ones, which the chat app has just written, are in the
    window, and the window is never recalled nor counted. They are indexed
    once the window has moved past them, many at once.
    """
    memory_top, memory_cursor = tops["memory"]
    message_top, message_cursor = tops["message"]
    if memory_top > memory_cursor:
        return True
    return message_top > message_cursor and (before is None or message_cursor < before - 1)


@dataclass(frozen=True)
class Result:
    """A recall result and what it was read from: its rows' ids and their texts then."""

    items: tuple[Recalled, ...]
    memories: dict[int, str]
    messages: dict[int, str]

    def still_there(self, conn: Connection) -> bool:
        """Whether every recalled row is there with the same text, not superseded (one read)."""
        parts: builtins.list[str] = []
        params: builtins.list[int] = []
        for table, ids in (("memory", self.memories), ("message", self.messages)):
            if ids:
                marks = ", ".join("?" * len(ids))
                kept = " AND superseded = 0" if table == "message" else ""
                parts.append(f"SELECT '{table}', id, text FROM {table} WHERE id IN ({marks}){kept}")
                params += ids
        if not parts:
            return True
        now: dict[str, dict[int, str]] = {"memory": {}, "message": {}}
        for table, row_id, body in dbapi_rows(conn, " UNION ALL ".join(parts), params):
            now[table][row_id] = body
        return now["memory"] == self.memories and now["message"] == self.messages


def recall_once(
    conn: Connection, counts: dict[str, Counts], q: Query, cursors: Mapping[str, int]
) -> Result:
    """One recall over caught-up indexes, on one read connection, with the term `counts`."""
    source = SqliteSource(conn, counts, cursors)
    items = pipeline.recall(source, q)
    return Result(
        tuple(items),
        {r.id: source.texts[("memory", r.id)] for r in items if r.kind == "memory"},
        {r.id: source.texts[("message", r.id)] for r in items if r.kind == "message"},
    )
