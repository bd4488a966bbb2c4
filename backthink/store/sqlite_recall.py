"""Recall on SQLite: the FTS5 words indexes read for one recall, and what a result stands on.

`SqlMemoryStore.recall` catches the indexes up and keeps the results by
window signature; `recall_once` reads them: the document counts of the
window's terms (`_Counts`, cached per index), the best rows of each index
by bm25, the neighbours of the best matched messages, and the choice
`backthink.memory.recall` makes of them.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from backthink.memory import phrases, recall
from backthink.models import MAIN_SESSION, MemoryKind, Message, Recalled
from backthink.store import fulltext
from backthink.store.neighbours import neighbours
from backthink.store.term_counts import TermCounts

COUNT_CHUNK = 16
"""Terms counted per statement (a handful of statement shapes, each prepared once)."""
# The index's best rows by bm25 first, then the join: the owner, session and
# delivery filters read only those rows, not every match (up to TERMS x DF_CAP).
# A few times more than CANDIDATES are read, so other owners' rows sharing the
# index rarely crowd out this owner's.
_MEMORY_HITS = (
    "SELECT m.id, m.kind, m.text, m.created_at FROM"
    " (SELECT rowid AS id, rank FROM memory_words WHERE memory_words MATCH ?"
    " ORDER BY rank LIMIT ?) AS hit JOIN memory m ON m.id = hit.id"
    " WHERE m.owner_id = ? ORDER BY hit.rank LIMIT ?"
)
_MESSAGE_HITS = (
    "SELECT m.id, m.text, m.created_at, m.role, m.origin FROM"
    " (SELECT rowid AS id, rank FROM message_words WHERE message_words MATCH ?"
    " AND rowid < ? ORDER BY rank LIMIT ?) AS hit JOIN message m ON m.id = hit.id"
    " WHERE m.owner_id = ? AND m.session_id = ? AND m.undelivered = 0"
    " ORDER BY hit.rank LIMIT ?"
)
_WIDE = 4
"""How many times CANDIDATES rows the index hands to the owner filter."""


def _utc(stamp: str) -> datetime:
    """A `created_at` as SQLite keeps it (naive UTC text) as an aware UTC datetime."""
    at = datetime.fromisoformat(stamp)
    return at.replace(tzinfo=UTC) if at.utcoffset() is None else at.astimezone(UTC)


def rows(conn: Connection, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
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
        now, rows = fulltext.indexed_since(conn, self.table, self.mark)
        self.advance(self.mark, now, rows)

    def read(self, conn: Connection, terms: Iterable[str]) -> dict[str, int]:
        """Document counts of the terms (0 when absent; past DF_CAP, DF_CAP + 1)."""
        missing = self.missing(terms)
        for start in range(0, len(missing), COUNT_CHUNK):
            chunk = missing[start : start + COUNT_CHUNK]
            params: builtins.list[Any] = []
            for term in chunk:
                params += [recall.term_query(term), recall.DF_CAP + 1]
            (counts,) = rows(conn, _count_sql(self.fts, len(chunk)), params)
            for term, count in zip(chunk, counts, strict=True):
                self.store(term, int(count))
        return self.df


Indexed = tuple[int, builtins.list[tuple[int, str]] | None]
"""A cursor, and the (id, text) of the rows indexed up to it (None: unknown)."""


def catch_up(
    conn: Connection, *, lagging: dict[str, int | None]
) -> tuple[dict[str, Indexed], dict[str, tuple[int, int]]]:
    """One catch-up batch of each lagging index (by the cursor its counts stand at); then `tops`."""
    moved = {t: fulltext.catch_up(conn, t, since) for t, since in lagging.items()}
    return moved, fulltext.tops(conn)


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


def below(cursor: int, before: int | None) -> int:
    """The indexed messages a recall stands on: those below the window."""
    return cursor if before is None else min(cursor, before - 1)


@dataclass(frozen=True)
class Result:
    """A recall result and what it was read from: its rows' ids and their texts then."""

    items: tuple[Recalled, ...]
    memories: dict[int, str]
    messages: dict[int, str]

    def still_there(self, conn: Connection) -> bool:
        """Whether every recalled row still exists with the same text (one read)."""
        parts: builtins.list[str] = []
        params: builtins.list[int] = []
        for table, ids in (("memory", self.memories), ("message", self.messages)):
            if ids:
                marks = ", ".join("?" * len(ids))
                parts.append(f"SELECT '{table}', id, text FROM {table} WHERE id IN ({marks})")
                params += ids
        if not parts:
            return True
        now: dict[str, dict[int, str]] = {"memory": {}, "message": {}}
        for table, row_id, body in rows(conn, " UNION ALL ".join(parts), params):
            now[table][row_id] = body
        return now["memory"] == self.memories and now["message"] == self.messages


def _counted(conn: Connection, counts: dict[str, Counts], terms: Collection[str]) -> dict[str, int]:
    """Each term's document count among memories and messages, the window's included."""
    on_memories = counts["memory"].read(conn, terms)
    df = {t: on_memories[t] for t in terms}
    on_messages = counts["message"].read(conn, terms)
    return {t: df[t] + on_messages[t] for t in terms}


def _outside(
    conn: Connection, counts: dict[str, Counts], terms: Collection[str], indexed: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Each term's document count among memories, and among messages less the `indexed` window."""
    on_memories = counts["memory"].read(conn, terms)
    df_memory = {t: on_memories[t] for t in terms}
    on_messages = counts["message"].read(conn, terms)
    shown = recall.inside(indexed, terms)
    # A count past DF_CAP is only a lower bound: it stays past the cap.
    df_message = {
        t: n if n > recall.DF_CAP else max(n - shown[t], 0)
        for t, n in ((t, on_messages[t]) for t in terms)
    }
    return df_memory, df_message


def _sum(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    return {t: n + second[t] for t, n in first.items()}


def recall_once(
    conn: Connection,
    counts: dict[str, Counts],
    owner_id: str,
    window: Sequence[Message],
    recent: dict[str, float],
    before: int | None,
    limit: int,
    max_chars: int,
    exclude: Collection[int],
    cursors: dict[str, int],
) -> Result:
    """One recall over caught-up indexes, on one read connection, with the term `counts`."""
    memory_counts, message_counts = counts["memory"], counts["message"]
    memory_counts.sync(conn, cursors["memory"])
    message_counts.sync(conn, cursors["message"])
    # The window's own messages are in the index (once caught up): they are taken
    # out of the counts, so a term only the window holds weighs nothing.
    indexed = [m.text for m in window if m.id is not None and m.id <= cursors["message"]]
    documents = max(cursors["memory"] + below(cursors["message"], before), 1)
    df_memory, df_message = _outside(conn, counts, recent, indexed)
    df = {t: df_memory[t] + df_message[t] for t in recent}
    asked = phrases.window_phrases(recall.window_texts(window), df, recall.df_cap(documents))
    stock = phrases.stock(_sum(*_outside(conn, counts, asked, indexed)))
    if stock:
        recent = recall.recency(window, stock)
    weights = recall.weigh(recent, df, documents, window)
    memory_terms = recall.best(weights, df_memory)
    message_terms = recall.best(weights, df_message) if before is not None else []
    found: builtins.list[recall.Candidate] = []
    # The hits are read on the DB-API connection (`rows`): through SQLAlchemy
    # each read cost more than the query itself.
    if memory_terms:
        wide = recall.CANDIDATES * _WIDE + len(exclude)
        found += [
            recall.Candidate("memory", i, body, _utc(at), MemoryKind(kind))
            for i, kind, body, at in rows(
                conn,
                _MEMORY_HITS,
                (
                    recall.words_query(memory_terms),
                    wide,
                    owner_id,
                    recall.CANDIDATES + len(exclude),
                ),
            )
            if i not in exclude
        ]
    if message_terms:
        params = (recall.words_query(message_terms), before, recall.CANDIDATES * _WIDE)
        found += [
            recall.Candidate("message", i, body, _utc(at), role=role, origin=origin)
            for i, body, at, role, origin in rows(
                conn, _MESSAGE_HITS, (*params, owner_id, MAIN_SESSION, recall.CANDIDATES)
            )
        ]
    scored = recall.rank(
        found, weights, window, df=df, documents=documents,
        specific=recall.rare(df, documents), stock=stock,
    )  # fmt: skip
    repeats = recall.repeats_asked(scored, weights)
    scored = recall.rerank(scored, weights, _sum(*_outside(conn, counts, repeats, indexed)))
    if before is not None:
        near = neighbours(conn, recall.anchors(scored), before=before)
        common = recall.stock(_counted(conn, counts, recall.shared(scored, near)), documents)
        scored = recall.with_neighbours(scored, near, common)
        found += [c for side in near.values() for c in side]
    items = recall.fill(scored, window, limit=limit, max_chars=max_chars, stock=stock)
    texts = {(c.kind, c.id): c.text for c in found}
    return Result(
        tuple(items),
        {r.id: texts[("memory", r.id)] for r in items if r.kind == "memory"},
        {r.id: texts[("message", r.id)] for r in items if r.kind == "message"},
    )
