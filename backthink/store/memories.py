"""SqlMemoryStore: long-term memories in the `memory` table, and recall over them and messages."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Integer, TextualSelect, bindparam, delete, insert, text
from sqlalchemy.engine import Connection
from sqlmodel import col, select

from backthink import recall
from backthink.models import MAIN_SESSION, Memory, MemoryKind, Message, Recalled
from backthink.store.columns import UTCDateTime
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import MemoryRow

MESSAGE_DRIFT = 64
"""Rows the message table may grow by before cached document counts are read again."""
DF_CACHE_TERMS = 50_000
"""Cached document counts kept at most, per index."""

_NEWEST_FIRST = (col(MemoryRow.created_at).desc(), col(MemoryRow.id).desc())

_MEMORY_HITS = (
    "SELECT m.id, m.kind, m.text, m.created_at FROM memory_fts JOIN memory m"
    " ON m.id = memory_fts.rowid WHERE memory_fts MATCH :q AND m.owner_id = :owner"
    " ORDER BY memory_fts.rank LIMIT :n"
)
_MESSAGE_HITS = (
    "SELECT m.id, m.text, m.created_at, m.role, m.origin FROM message_fts JOIN message m"
    " ON m.id = message_fts.rowid WHERE message_fts MATCH :q AND message_fts.rowid < :before"
    " AND m.owner_id = :owner AND m.session_id = :session AND m.undelivered = 0"
    " ORDER BY message_fts.rank LIMIT :n"
)


def _query(sql: str) -> TextualSelect:
    """A text query whose `created_at` comes back as an aware UTC datetime."""
    return text(sql).columns(created_at=UTCDateTime())


def _memory(row: Any) -> Memory:
    return Memory.model_validate(dict(row))


def _like(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class _Counts:
    """Cached per-token document counts of one index, read again once the table moved on."""

    def __init__(self, table: str, drift: int) -> None:
        self.table = table
        self.drift = drift
        self.mark = -1
        self.df: dict[str, int] = {}

    def read(self, conn: Connection, tokens: Iterable[str]) -> tuple[dict[str, int], int]:
        """Document counts of the tokens (0 when absent) and the table's highest id."""
        top = conn.exec_driver_sql(f"SELECT coalesce(max(id), 0) FROM {self.table}").scalar_one()
        if top - self.mark > self.drift or top < self.mark or len(self.df) > DF_CACHE_TERMS:
            self.df.clear()
            self.mark = top
        missing = [t for t in set(tokens) if t not in self.df]
        if missing:
            found = dict.fromkeys(missing, 0)
            marks = ", ".join(f":t{i}" for i in range(len(missing)))
            rows = conn.execute(
                text(f"SELECT term, doc FROM {self.table}_fts_vocab WHERE term IN ({marks})"),
                {f"t{i}": t for i, t in enumerate(missing)},
            )
            found.update({str(term): int(doc) for term, doc in rows})
            self.df.update(found)
        return self.df, int(top)


def _term_df(term: str, df: dict[str, int]) -> int:
    """A term's document count: a phrase of trigrams is in no more rows than its rarest one."""
    return min((df.get(t, 0) for t in recall.trigrams(term)), default=0)


class SqlMemoryStore:
    """The MemoryStore on SQL. Search and recall use the FTS5 indexes on SQLite.

    On other databases `search` scans with LIKE and `recall` finds nothing yet.
    """

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db
        self._fulltext = db.engine.url.get_backend_name() == "sqlite"
        self._memory_df = _Counts("memory", 0)
        self._message_df = _Counts("message", MESSAGE_DRIFT)

    async def add(self, memory: Memory) -> Memory:
        """Store one memory and return it with its id.

        Raises:
            StoreError: the database failed, or the id is already taken.
        """
        values = {**dict(memory), "kind": memory.kind.value}
        if values["id"] is None:
            del values["id"]
        statement = insert(MemoryRow).returning(col(MemoryRow.id))
        with store_errors("could not store memory"):
            new_id = await self._db.write(lambda c: c.execute(statement, values).scalar_one())
        return Memory.model_validate({**dict(memory), "id": new_id})

    async def list(
        self, owner_id: str, *, kind: MemoryKind | None = None, limit: int = 20
    ) -> builtins.list[Memory]:
        """Return an owner's memories newest first, of one kind or of every kind."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        query = select(MemoryRow).where(col(MemoryRow.owner_id) == owner_id)
        if kind is not None:
            query = query.where(col(MemoryRow.kind) == kind.value)
        query = query.order_by(*_NEWEST_FIRST).limit(bindparam("n", type_=Integer))
        with store_errors("could not read memories"):
            rows = await self._db.read(lambda c: c.execute(query, {"n": limit}).mappings().all())
            return [_memory(row) for row in rows]

    async def latest_thoughts(self, owner_id: str, n: int) -> builtins.list[Memory]:
        """Return an owner's newest `n` thoughts, newest first."""
        return await self.list(owner_id, kind=MemoryKind.THOUGHT, limit=n)

    async def forget(self, owner_id: str, memory_id: int) -> bool:
        """Delete one memory of an owner, from the table and its index; False if none.

        The index is optimized afterwards, so no segment keeps the forgotten
        text's tokens, and deleted pages are overwritten (secure_delete).
        """

        def run(conn: Connection) -> bool:
            conn.exec_driver_sql("PRAGMA secure_delete = ON")
            gone = conn.execute(
                delete(MemoryRow).where(
                    col(MemoryRow.id) == memory_id, col(MemoryRow.owner_id) == owner_id
                )
            ).rowcount
            if gone and self._fulltext:
                conn.exec_driver_sql("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
            return bool(gone)

        with store_errors("could not forget memory"):
            found = await self._db.write(run)
        self._memory_df.mark = -1
        return found

    async def search(self, owner_id: str, query: str, *, limit: int = 20) -> builtins.list[Memory]:
        """Return an owner's memories that hold every word of `query`, newest first.

        A word is a run without spaces; matching ignores case. Words of three
        characters or more use the index; a shorter one makes it a scan of
        the owner's memories (the trigram index cannot find it).
        """
        words = list(dict.fromkeys(query.lower().split()))
        if not words:
            return []
        if self._fulltext and all(len(w) >= 3 for w in words):
            sql = (
                "SELECT m.* FROM memory_fts JOIN memory m ON m.id = memory_fts.rowid"
                " WHERE memory_fts MATCH :q AND m.owner_id = :owner"
                " ORDER BY m.created_at DESC, m.id DESC LIMIT :n"
            )
            params: dict[str, Any] = {"q": " AND ".join(recall.quote(w) for w in words)}
        else:
            likes = " AND ".join(f"lower(text) LIKE :w{i} ESCAPE '\\'" for i in range(len(words)))
            sql = (
                f"SELECT * FROM memory WHERE owner_id = :owner AND {likes}"
                " ORDER BY created_at DESC, id DESC LIMIT :n"
            )
            params = {f"w{i}": _like(w) for i, w in enumerate(words)}
        params.update(owner=owner_id, n=limit)
        statement = _query(sql)
        with store_errors("could not search memories"):
            rows = await self._db.read(lambda c: c.execute(statement, params).mappings().all())
            return [_memory(row) for row in rows]

    async def recall(
        self,
        owner_id: str,
        window: Sequence[Message],
        *,
        limit: int,
        max_chars: int,
        before_message_id: int | None = None,
    ) -> builtins.list[Recalled]:
        """Return the memories and older main-session messages the window brings to mind.

        See `backthink.recall` for how terms are chosen, weighed and gated.
        Messages at or after `before_message_id` (default: the window's first)
        are never recalled.
        """
        recent = recall.recency(window)
        ids = [m.id for m in window if m.id is not None]
        before = before_message_id if before_message_id is not None else min(ids, default=None)
        if not self._fulltext or not recent or limit <= 0 or max_chars <= 0:
            return []
        tokens = {t for term in recent for t in recall.trigrams(term)}

        def read(conn: Connection) -> builtins.list[Recalled]:
            memory_df, memories = self._memory_df.read(conn, tokens)
            message_df, messages = self._message_df.read(conn, tokens)
            df_memory = {term: _term_df(term, memory_df) for term in recent}
            df_message = {}
            for term in recent:
                inside = sum(1 for m in window if recall.contains(m.text, term))
                df_message[term] = max(_term_df(term, message_df) - inside, 0)
            df = {term: df_memory[term] + df_message[term] for term in recent}
            weights = recall.weigh(recent, df, memories + messages - len(window))
            found: list[recall.Candidate] = []
            memory_terms = [t for t in weights if df_memory[t] > 0]
            if memory_terms:
                rows = conn.execute(
                    _query(_MEMORY_HITS),
                    {
                        "q": recall.match_query(memory_terms),
                        "owner": owner_id,
                        "n": recall.CANDIDATES,
                    },
                )
                for row in rows.mappings():
                    memory = _memory({**row, "owner_id": owner_id, "source": ""})
                    found.append(
                        recall.Candidate(
                            "memory", row["id"], memory.text, memory.created_at, memory.kind
                        )
                    )
            message_terms = [t for t in weights if df_message[t] > 0]
            if message_terms and before is not None:
                rows = conn.execute(
                    _query(_MESSAGE_HITS),
                    {
                        "q": recall.match_query(message_terms),
                        "before": before,
                        "owner": owner_id,
                        "session": MAIN_SESSION,
                        "n": recall.CANDIDATES,
                    },
                )
                for row in rows.mappings():
                    message = Message.model_validate({**row, "owner_id": owner_id})
                    found.append(
                        recall.Candidate(
                            "message",
                            row["id"],
                            message.text,
                            message.created_at,
                            role=message.role,
                            origin=message.origin,
                        )
                    )
            return recall.select(found, weights, window, limit=limit, max_chars=max_chars)

        with store_errors("could not recall"):
            return await self._db.read(read)
