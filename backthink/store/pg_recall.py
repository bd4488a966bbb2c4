"""Search and recall on PostgreSQL, over pg_trgm GIN indexes on `memory.text` and `message.text`.

PostgreSQL keeps the trigram indexes current itself, inside every writer's
transaction (the chat app's too), so unlike SQLite's FTS5 path nothing is
caught up and nothing can be stale: a deleted row is gone, an edited one
matches what it now says.

Recall runs the same pipeline as on SQLite and in memory
(`backthink.memory.pipeline`) over `PgSource`. A term is found by the
words index (`fulltext.PG_WORDS`: a GIN index over the words and CJK
2-grams `backthink_words` makes of a text), a CJK 2-gram as a whole lexeme,
a latin stem as a lexeme's prefix, as FTS5 finds them on SQLite.

The database needs a UTF-8 encoding with a UTF-8 ctype (e.g. `C.UTF-8`):
under the C ctype pg_trgm sees no CJK characters, and its index then finds
every row for a CJK term (still correct, only slow).

Ids stand in for row counts (N) and for how far the term counts have read,
as they do on SQLite. A row committed late under an id below the highest
already seen is not added to the cached counts; it is still found by every
query, and counted once the cache starts over.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import TextualSelect, text
from sqlalchemy.engine import Connection

from backthink.memory import pipeline
from backthink.memory.pipeline import Documents, Query, Side
from backthink.memory.scoring import DF_CAP, Candidate
from backthink.memory.terms import is_phrase, is_word
from backthink.models import MAIN_SESSION, Memory, Recalled
from backthink.store.columns import UTCDateTime
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.fulltext import CATCH_UP_ROWS, INDEXED, PG_WORDS
from backthink.store.recall_rows import neighbours, visible
from backthink.store.term_counts import TermCounts

COUNT_CHUNK = 32
"""Terms counted per statement: one round trip each."""

_TOPS = text("SELECT " + ", ".join(f"(SELECT coalesce(max(id), 0) FROM {t})" for t in INDEXED))


def like(term: str) -> str:
    """An ILIKE pattern matching `term` anywhere, its wildcards taken literally."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _query(sql: str) -> TextualSelect:
    """A text query whose `created_at` comes back as an aware UTC datetime."""
    return text(sql).columns(created_at=UTCDateTime())


def tops(conn: Connection) -> dict[str, int]:
    """Each indexed table's highest id (0 when empty), in one read."""
    row = conn.execute(_TOPS).one()
    return {t: int(row[i]) for i, t in enumerate(INDEXED)}


class _PgCounts(TermCounts):
    """Term counts of one table, moved on by the rows past the highest id they stand at."""

    def sync(self, conn: Connection, top: int) -> None:
        """Bring the counts to `top`, reading the rows added since `mark` (a batch at most)."""
        if top == self.mark:
            return
        if self.mark < 0 or top < self.mark:
            self.clear(top)
            return
        found = conn.execute(
            text(
                f"SELECT id, text FROM {self.table} WHERE id > :since AND id <= :top"
                " ORDER BY id LIMIT :n"
            ),
            {"since": self.mark, "top": top, "n": CATCH_UP_ROWS + 1},
        ).all()
        rows = None if len(found) > CATCH_UP_ROWS else [(int(i), str(t)) for i, t in found]
        self.advance(self.mark, top, rows)

    def read(self, conn: Connection, terms: Iterable[str]) -> dict[str, int]:
        """Document counts of the terms (0 when absent; past DF_CAP, DF_CAP + 1)."""
        missing = self.missing(terms)
        for start in range(0, len(missing), COUNT_CHUNK):
            chunk = missing[start : start + COUNT_CHUNK]
            one = (
                "(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {words}"
                " @@ to_tsquery('simple', :p{i}) LIMIT :cap) AS c{i})"
            )
            sql = "SELECT " + ", ".join(
                one.format(table=self.table, words=PG_WORDS, i=i) for i in range(len(chunk))
            )
            params: dict[str, Any] = {f"p{i}": tsquery(t) for i, t in enumerate(chunk)}
            params["cap"] = DF_CAP + 1
            counts = conn.execute(text(sql), params).one()
            for term, count in zip(chunk, counts, strict=True):
                self.store(term, int(count))
        return self.df


def tsquery(term: str) -> str:
    """A term as a tsquery of the words index: a CJK 2-gram whole, a latin stem as a prefix.

    A phrase is its tokens one after the other (<->). A token is letters and
    digits only, so nothing in it is tsquery syntax; it is quoted all the same.
    """
    if is_phrase(term):
        return " <-> ".join(_lexeme(token) for token in term.split(" "))
    return _lexeme(term) + (":*" if is_word(term) else "")


def _lexeme(token: str) -> str:
    """One index token as a quoted tsquery lexeme."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


_WORDS = PG_WORDS.replace("(text)", "(m.text)")
_VISIBLE = {
    "memory": "memory m WHERE m.owner_id = :owner",
    "message": (
        "message m WHERE m.owner_id = :owner AND m.session_id = :session AND m.id < :before"
        " AND NOT m.undelivered AND NOT m.superseded"
    ),
}
"""Per side, the rows an owner may recall."""


def _hits_sql(side: Side, terms: int) -> str:
    """The owner's rows holding any of `terms` terms, and which of them each holds.

    The words index finds the rows for all the terms at once; each found
    row's words are then made once (OFFSET 0 keeps the planner from making
    them again for every term) and matched against each term.
    """
    held = ", ".join(f"s.v @@ to_tsquery('simple', :q{i})" for i in range(terms))
    return (
        f"SELECT s.id, {held} FROM (SELECT m.id, {_WORDS} AS v FROM {_VISIBLE[side]}"
        f" AND {_WORDS} @@ to_tsquery('simple', :q) OFFSET 0) AS s"
    )


class PgSource:
    """A `RecallSource` over the words GIN indexes, on one connection, with cached counts."""

    def __init__(self, conn: Connection, counts: dict[str, _PgCounts]) -> None:
        """Read on `conn`; bring the term `counts` to each table's highest id."""
        self._conn = conn
        self._counts = counts
        top = tops(conn)
        for table, counted in counts.items():
            counted.sync(conn, top[table])
        self._top = Documents(top["memory"], top["message"])

    def documents(self) -> Documents:
        """Each table's highest id (see `RecallSource.documents`)."""
        return self._top

    def counts(self, side: Side, terms: Collection[str]) -> Mapping[str, int]:
        """Rows of a table holding each term (see `RecallSource.counts`)."""
        return self._counts[side].read(self._conn, terms)

    def hits(
        self, side: Side, terms: Sequence[str], *, owner_id: str, before: int | None
    ) -> Iterable[tuple[int, int]]:
        """Each term's rows among the owner's (see `RecallSource.hits`), one statement."""
        if side == "message" and before is None:
            return []
        params: dict[str, Any] = {f"q{i}": tsquery(t) for i, t in enumerate(terms)}
        params.update(q=" | ".join(params.values()), owner=owner_id, session=MAIN_SESSION)
        params.update(before=before)
        found = self._conn.execute(text(_hits_sql(side, len(terms))), params)
        return [(i, int(row_id)) for row_id, *held in found for i, h in enumerate(held) if h]

    def rows(
        self, side: Side, ids: Sequence[int], *, owner_id: str, before: int | None
    ) -> Iterable[Candidate]:
        """The owner's rows among `ids` (see `RecallSource.rows`)."""
        return visible(self._conn, side, ids, owner_id=owner_id, before=before)

    def neighbours(
        self, anchors: Sequence[int], *, owner_id: str, before: int
    ) -> Mapping[int, Sequence[Candidate]]:
        """The messages beside each anchor (see `RecallSource.neighbours`)."""
        return neighbours(self._conn, anchors, owner_id=owner_id, before=before)


class PgRecall:
    """Search and recall for `SqlMemoryStore` on PostgreSQL, with its term counts cached."""

    def __init__(self, db: Database) -> None:
        """Use `db`, a migrated PostgreSQL database."""
        self._db = db
        self._counts = {table: _PgCounts(table) for table in INDEXED}

    async def forgot(self) -> None:
        """A memory was deleted: vacuum it away (row and index entries); counts start over.

        VACUUM runs outside any transaction, on a connection of its own. It
        skips a table the database user does not own, with a warning only.
        """
        self._counts["memory"].clear()
        with store_errors("could not vacuum forgotten memory"):
            async with self._db.engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.exec_driver_sql("VACUUM memory")

    async def search(self, owner_id: str, words: Sequence[str], limit: int) -> list[Memory]:
        """An owner's memories holding every word (any case), newest first."""
        holds = " AND ".join(f"m.text ILIKE :p{i}" for i in range(len(words)))
        statement = _query(
            f"SELECT m.* FROM memory m WHERE m.owner_id = :owner AND {holds}"
            " ORDER BY m.created_at DESC, m.id DESC LIMIT :n"
        )
        params: dict[str, Any] = {f"p{i}": like(w) for i, w in enumerate(words)}
        params.update(owner=owner_id, n=limit)
        with store_errors("could not search memories"):
            rows = await self._db.read(lambda c: c.execute(statement, params).mappings().all())
            return [Memory.model_validate(dict(row)) for row in rows]

    async def recall(self, q: Query) -> list[Recalled]:
        """What `SqlMemoryStore.recall` returns, read on one connection."""
        with store_errors("could not recall"):
            return await self._db.read(
                lambda conn: pipeline.recall(PgSource(conn, self._counts), q)
            )
