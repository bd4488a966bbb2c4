"""Search and recall on PostgreSQL, over pg_trgm GIN indexes on `memory.text` and `message.text`.

PostgreSQL keeps the trigram indexes current itself, inside every writer's
transaction (the chat app's too), so unlike SQLite's FTS5 path nothing is
caught up and nothing can be stale: a deleted row is gone, an edited one
matches what it now says.

Recall follows the same contract as on SQLite (`backthink.memory.recall`): the
window's terms (CJK 2-grams, latin stems) weigh recency times log(N / df),
with df counted outside the window and capped at `DF_CAP + 1`; each table
is queried with the best `TERMS` of the terms it holds and the rows go
through the same gate, de-duplication and bounds. A term is found by the
words index (`fulltext.PG_WORDS`: a GIN index over the words and CJK
2-grams `backthink_words` makes of a text), a CJK 2-gram as a whole lexeme,
a latin stem as a lexeme's prefix, as FTS5 finds them on SQLite. Where FTS5
ranks its rows by bm25 before the re-ranking, this query ranks them by the
summed weights of the terms they hold, which is what the re-ranking
computes.

The database needs a UTF-8 encoding with a UTF-8 ctype (e.g. `C.UTF-8`):
under the C ctype pg_trgm sees no CJK characters, and its index then finds
every row for a CJK term (still correct, only slow).

Ids stand in for row counts (N) and for how far the term counts have read,
as they do on SQLite. A row committed late under an id below the highest
already seen is not added to the cached counts; it is still found by every
query, and counted once the cache starts over.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import TextualSelect, text
from sqlalchemy.engine import Connection

from backthink.memory import phrases, recall, terms
from backthink.models import MAIN_SESSION, Memory, MemoryKind, Message, Recalled
from backthink.store.columns import UTCDateTime
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.fulltext import CATCH_UP_ROWS, INDEXED, PG_WORDS
from backthink.store.neighbours import neighbours
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
            params["cap"] = recall.DF_CAP + 1
            counts = conn.execute(text(sql), params).one()
            for term, count in zip(chunk, counts, strict=True):
                self.store(term, int(count))
        return self.df


def tsquery(term: str) -> str:
    """A term as a tsquery of the words index: a CJK 2-gram whole, a latin stem as a prefix.

    A phrase is its tokens one after the other (<->). A token is letters and
    digits only, so nothing in it is tsquery syntax; it is quoted all the same.
    """
    if terms.is_phrase(term):
        return " <-> ".join(_lexeme(token) for token in term.split(" "))
    return _lexeme(term) + (":*" if terms.is_word(term) else "")


def _lexeme(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _hits_sql(select: str, table: str, where: str, terms: int) -> str:
    """Rows the words index finds for any of `terms` terms, best first.

    They are ranked by the summed weights of the terms their text holds as
    substrings (a cheap re-check of the few rows found), as the re-ranking
    then does by word starts.
    """
    score = " + ".join(
        f"CASE WHEN m.text ILIKE :p{i} THEN CAST(:w{i} AS float8) ELSE 0 END" for i in range(terms)
    )
    found = PG_WORDS.replace("(text)", "(m.text)")
    return (
        f"SELECT {select} FROM {table} m WHERE {where}"
        f" AND {found} @@ to_tsquery('simple', :q)"
        f" ORDER BY {score} DESC, m.created_at DESC, m.id DESC LIMIT :n"
    )


def _term_params(terms: Sequence[str], weights: dict[str, float]) -> dict[str, Any]:
    params: dict[str, Any] = {"q": " | ".join(tsquery(t) for t in terms)}
    for i, term in enumerate(terms):
        params[f"p{i}"] = like(term)
        params[f"w{i}"] = weights[term]
    return params


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

    async def recall(
        self,
        owner_id: str,
        window: Sequence[Message],
        recent: dict[str, float],
        *,
        before: int | None,
        limit: int,
        max_chars: int,
        exclude: Collection[int],
    ) -> list[Recalled]:
        """What `SqlMemoryStore.recall` returns, read on one connection."""
        with store_errors("could not recall"):
            return await self._db.read(
                lambda conn: self._recall(
                    conn, owner_id, window, recent, before, limit, max_chars, exclude
                )
            )

    def _recall(
        self,
        conn: Connection,
        owner_id: str,
        window: Sequence[Message],
        recent: dict[str, float],
        before: int | None,
        limit: int,
        max_chars: int,
        exclude: Collection[int],
    ) -> list[Recalled]:
        top = tops(conn)
        memory_counts, message_counts = self._counts["memory"], self._counts["message"]
        memory_counts.sync(conn, top["memory"])
        message_counts.sync(conn, top["message"])
        # Every stored window message is in the counts: take them out, so a term
        # only the window holds weighs nothing.
        counted = [m.text for m in window if m.id is not None and m.id <= message_counts.mark]
        below = top["message"] if before is None else min(top["message"], before - 1)
        documents = max(top["memory"] + below, 1)

        def outside(terms: Collection[str]) -> tuple[dict[str, int], dict[str, int]]:
            on_memories = memory_counts.read(conn, terms)
            on_messages = message_counts.read(conn, terms)
            shown = recall.inside(counted, terms)
            # A count past DF_CAP is only a lower bound: it stays past the cap.
            return {t: on_memories[t] for t in terms}, {
                t: n if n > recall.DF_CAP else max(n - shown[t], 0)
                for t, n in ((t, on_messages[t]) for t in terms)
            }

        df_memory, df_message = outside(recent)
        df = {t: df_memory[t] + df_message[t] for t in recent}
        asked = phrases.window_phrases(recall.window_texts(window), df, recall.df_cap(documents))
        stock = phrases.stock(_sum(*outside(asked)))
        if stock:
            recent = recall.recency(window, stock)
        weights = recall.weigh(recent, df, documents, window)
        memory_terms = recall.best(weights, df_memory)
        message_terms = recall.best(weights, df_message) if before is not None else []
        found: list[recall.Candidate] = []
        if memory_terms:
            sql = _hits_sql(
                "m.id, m.kind, m.text, m.created_at", "memory", "m.owner_id = :owner",
                len(memory_terms),
            )  # fmt: skip
            params = _term_params(memory_terms, weights)
            params.update(owner=owner_id, n=recall.CANDIDATES + len(exclude))
            found += [
                recall.Candidate("memory", i, body, at, MemoryKind(kind))
                for i, kind, body, at in conn.execute(_query(sql), params)
                if i not in exclude
            ]
        if message_terms:
            sql = _hits_sql(
                "m.id, m.text, m.created_at, m.role, m.origin",
                "message",
                "m.owner_id = :owner AND m.session_id = :session AND m.id < :before"
                " AND NOT m.undelivered",
                len(message_terms),
            )
            params = _term_params(message_terms, weights)
            params.update(owner=owner_id, session=MAIN_SESSION, before=before, n=recall.CANDIDATES)
            found += [
                recall.Candidate("message", i, body, at, role=role, origin=origin)
                for i, body, at, role, origin in conn.execute(_query(sql), params)
            ]
        scored = recall.rank(
            found, weights, window, df=df, documents=documents,
            specific=recall.rare(df, documents), stock=stock,
        )  # fmt: skip
        repeats = recall.repeats_asked(scored, weights)
        scored = recall.rerank(scored, weights, _sum(*outside(repeats)))
        if before is not None:
            near = neighbours(conn, recall.anchors(scored), before=before)
            shared = recall.shared(scored, near)
            on_memories = memory_counts.read(conn, shared)
            df_shared = {t: on_memories[t] for t in shared}
            on_messages = message_counts.read(conn, shared)
            df_shared = {t: df_shared[t] + on_messages[t] for t in shared}
            scored = recall.with_neighbours(scored, near, recall.stock(df_shared, documents))
        return recall.fill(scored, window, limit=limit, max_chars=max_chars, stock=stock)


def _sum(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    return {t: n + second[t] for t, n in first.items()}
