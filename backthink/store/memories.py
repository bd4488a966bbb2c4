"""SqlMemoryStore: long-term memories in the `memory` table, and recall over them and messages."""

from __future__ import annotations

import builtins
from collections import OrderedDict
from collections.abc import Collection, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, TextualSelect, bindparam, delete, insert, text
from sqlalchemy.engine import Connection
from sqlmodel import col, select

import backthink.store.fulltext as fulltext
from backthink.memory import pipeline
from backthink.memory.pipeline import below
from backthink.memory.terms import quote
from backthink.models import Memory, MemoryKind, Message, Recalled
from backthink.store.columns import UTCDateTime
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.sqlite_recall import (
    Counts,
    Indexed,
    Result,
    catch_up,
    dbapi_rows,
    lagging,
    recall_once,
)
from backthink.store.tables import MemoryRow

if TYPE_CHECKING:
    from backthink.store.pg_recall import PgRecall

RESULT_CACHE = 64
"""Recall results kept, by window signature (a few per owner)."""

_NEWEST_FIRST = (col(MemoryRow.created_at).desc(), col(MemoryRow.id).desc())


def _query(sql: str) -> TextualSelect:
    """A text query whose `created_at` comes back as an aware UTC datetime."""
    return text(sql).columns(created_at=UTCDateTime())


def _memory(row: Any) -> Memory:
    return Memory.model_validate(dict(row))


def _like(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class SqlMemoryStore:
    """The MemoryStore on SQL. Search and recall use the FTS5 indexes on SQLite.

    The indexes are caught up (`fulltext.catch_up`) before a search or a
    recall reads them. On PostgreSQL both go to `pg_recall.PgRecall`, over
    trigram indexes PostgreSQL keeps current itself. On other databases
    `search` scans with LIKE and `recall` finds nothing.

    A store keeps, in memory, the document counts recall weighs terms by and
    its last few results by window signature: a round whose window, indexes
    and bounds are those of an earlier one (a heartbeat with nothing new)
    gets the same list back after one read checking its rows are still there.
    """

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db
        backend = db.engine.url.get_backend_name()
        self._fulltext = backend == "sqlite"
        self._pg: PgRecall | None = None
        if backend == "postgresql":
            from backthink.store.pg_recall import PgRecall

            self._pg = PgRecall(db)
        self._counts = {table: Counts(table) for table in fulltext.INDEXED}
        self._results: OrderedDict[tuple[Any, ...], Result] = OrderedDict()

    async def add(self, memory: Memory) -> Memory:
        """Store one memory, indexed at once, and return it with its id.

        Raises:
            StoreError: the database failed, or the id is already taken.
        """
        values = {**dict(memory), "kind": memory.kind.value}
        if values["id"] is None:
            del values["id"]
        statement = insert(MemoryRow).returning(col(MemoryRow.id))
        counts = self._counts["memory"]
        since = counts.mark if counts.mark >= 0 else None

        def run(conn: Connection) -> tuple[int | None, Indexed | None]:
            new_id = conn.execute(statement, values).scalar_one()
            if not self._fulltext:
                return new_id, None
            return new_id, fulltext.catch_up(conn, "memory", since)

        with store_errors("could not store memory"):
            new_id, indexed = await self._db.write(run)
        if indexed is not None:
            counts.advance(since, *indexed)
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

    async def get_many(self, owner_id: str, ids: Collection[int]) -> builtins.list[Memory]:
        """Return an owner's memories with these ids, newest first; ids not there are left out."""
        wanted = sorted(set(ids))
        if not wanted:
            return []
        query = (
            select(MemoryRow)
            .where(col(MemoryRow.owner_id) == owner_id, col(MemoryRow.id).in_(wanted))
            .order_by(*_NEWEST_FIRST)
        )
        with store_errors("could not read memories"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return [_memory(row) for row in rows]

    async def forget(self, owner_id: str, memory_id: int) -> bool:
        """Delete one memory of an owner, from the table and its index; False if none.

        Its index entries are deleted with its text (if it was indexed), the
        index is optimized afterwards, so no segment keeps the forgotten
        text's tokens, and deleted pages are overwritten (secure_delete). A
        memory the chat app edited after it was indexed is deleted with its
        current text; the tokens only the old text had stay in the index
        (not the text) until a 'rebuild'. On PostgreSQL the table is vacuumed
        after the delete, which removes the dead row and its index entries.
        """

        def run(conn: Connection) -> bool:
            if self._fulltext:
                conn.exec_driver_sql("PRAGMA secure_delete = ON")
            old = conn.execute(
                select(MemoryRow.text).where(
                    col(MemoryRow.id) == memory_id, col(MemoryRow.owner_id) == owner_id
                )
            ).scalar_one_or_none()
            if old is None:
                return False
            conn.execute(delete(MemoryRow).where(col(MemoryRow.id) == memory_id))
            if self._fulltext:
                fulltext.unindex(conn, "memory", memory_id, old)
                fulltext.optimize(conn, "memory")
            return True

        with store_errors("could not forget memory"):
            found = await self._db.write(run)
        if found:
            self._counts["memory"].clear()
            self._results.clear()
            if self._pg is not None:
                await self._pg.forgot()
        return found

    async def search(self, owner_id: str, query: str, *, limit: int = 20) -> builtins.list[Memory]:
        """Return an owner's memories that hold every word of `query`, newest first.

        A word is a run without spaces (nor NULs); matching ignores case. Words of three
        characters or more use the index (caught up first, to the end); a
        shorter one makes it a scan of the owner's memories (the trigram index
        cannot find it).
        """
        # A NUL is no character anyone searches for, and would end a MATCH string.
        words = list(dict.fromkeys(query.replace("\0", " ").lower().split()))
        if not words:
            return []
        if self._pg is not None:
            return await self._pg.search(owner_id, words, limit)
        likes = " AND ".join(f"lower(m.text) LIKE :w{i} ESCAPE '\\'" for i in range(len(words)))
        params: dict[str, Any] = {f"w{i}": _like(w) for i, w in enumerate(words)}
        if self._fulltext and all(len(w) >= 3 for w in words):
            await self._catch_up(everything=True)
            # The index finds the rows; LIKE re-checks their current text, which
            # the chat app may have edited since they were indexed.
            sql = (
                "SELECT m.* FROM memory_fts JOIN memory m ON m.id = memory_fts.rowid"
                f" WHERE memory_fts MATCH :q AND m.owner_id = :owner AND {likes}"
                " ORDER BY m.created_at DESC, m.id DESC LIMIT :n"
            )
            params["q"] = " AND ".join(quote(w) for w in words)
        else:
            sql = (
                f"SELECT m.* FROM memory m WHERE m.owner_id = :owner AND {likes}"
                " ORDER BY m.created_at DESC, m.id DESC LIMIT :n"
            )
        params.update(owner=owner_id, n=limit)
        statement = _query(sql)
        with store_errors("could not search memories"):
            rows = await self._db.read(lambda c: c.execute(statement, params).mappings().all())
            return [_memory(row) for row in rows]

    async def index(self) -> None:
        """Index every row the indexes lack now (after a large import, say), batch by batch.

        Raises:
            StoreError: the database failed.
        """
        if self._fulltext:
            await self._catch_up(everything=True)

    async def _catch_up(self, *, everything: bool = False) -> dict[str, tuple[int, int]]:
        """Index what the indexes lack: one batch per index, or all of it; return `tops`."""
        with store_errors("could not index memories and messages"):
            tops = await self._db.read(fulltext.tops)
            while any(top > cursor for top, cursor in tops.values()):
                lagging = {
                    t: (self._counts[t].mark if self._counts[t].mark >= 0 else None)
                    for t, (top, cursor) in tops.items()
                    if top > cursor
                }
                moved, after = await self._db.write(partial(catch_up, lagging=lagging))
                for table, (cursor, rows) in moved.items():
                    self._counts[table].advance(lagging[table], cursor, rows)
                stuck = all(after[t][1] <= tops[t][1] for t in moved)
                tops = after
                if not everything or stuck:
                    break
            return tops

    async def recall(
        self,
        owner_id: str,
        window: Sequence[Message],
        *,
        limit: int,
        max_chars: int,
        before_message_id: int | None = None,
        exclude: Collection[int] = (),
    ) -> builtins.list[Recalled]:
        """Return the memories and older main-session messages the window brings to mind.

        See `backthink.memory.pipeline` for how terms are chosen, weighed and gated.
        Messages at or after `before_message_id` (default: the window's first)
        are never recalled, nor memories whose id is in `exclude` (the journal
        shows them already). Unindexed memories, or messages below the window,
        are indexed first, at most `fulltext.CATCH_UP_ROWS` rows per index,
        so a round never waits for a long backlog; the rounds after index the
        rest. Unindexed window messages wait (see `_lagging`).

        The same window, bounds and exclusions over unchanged indexes return
        an equal list (the prompt stays byte-identical), from a cache.
        """
        q = pipeline.query(
            owner_id,
            window,
            limit=limit,
            max_chars=max_chars,
            before_message_id=before_message_id,
            exclude=exclude,
        )
        if q is None:
            return []
        if self._pg is not None:
            return await self._pg.recall(q)
        if not self._fulltext:
            return []
        before = q.before
        signature = (
            owner_id,
            tuple((m.id, m.text) for m in q.window),
            before,
            limit,
            max_chars,
            q.exclude,
        )

        def key(tops: dict[str, tuple[int, int]]) -> tuple[Any, ...]:
            # What the result depends on: the window and bounds, the memories, and
            # the messages below the window (the newest id too, so a new message
            # anywhere is seen), not how far the window itself is indexed.
            message_top, message_cursor = tops["message"]
            return (signature, tops["memory"], message_top, below(message_cursor, before))

        def cached(conn: Connection) -> tuple[dict[str, tuple[int, int]], Result | None]:
            tops = fulltext.parse_tops(dbapi_rows(conn, fulltext.TOPS_SQL)[0])
            hit = self._results.get(key(tops))
            if hit is not None and not hit.still_there(conn):
                hit = None
            return tops, hit

        with store_errors("could not recall"):
            tops, hit = await self._db.read(cached)
            if hit is None and lagging(tops, before):
                tops = await self._catch_up()
                hit = self._results.get(key(tops))
                if hit is not None and not await self._db.read(hit.still_there):
                    hit = None
            if hit is not None:
                self._results.move_to_end(key(tops))
                return builtins.list(hit.items)
            cursors = {t: cursor for t, (_, cursor) in tops.items()}
            result = await self._db.read(lambda conn: recall_once(conn, self._counts, q, cursors))
        self._results[key(tops)] = result
        while len(self._results) > RESULT_CACHE:
            self._results.popitem(last=False)
        return builtins.list(result.items)
