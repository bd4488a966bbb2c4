"""Recall from start to end, over any store: the source a store gives, and the one pipeline.

A store gives recall a `RecallSource`: how many rows each side holds, how
many hold a term, which rows its index finds for a term, the rows an owner
may recall, and the messages beside a recalled one. The pipeline does
everything else, the same for SQLite, PostgreSQL and the in-memory store,
so the three recall equal lists from equal rows (see `backthink.memory.scoring`
for how terms are weighed, gated and kept):

1. The window's terms (`recency`) are counted outside the window (`counts`
   less the window's own messages, `inside`). The window's clauses are
   counted so too (`phrases.window_phrases`): those said before are stock
   phrases (`phrases.stock`), whose terms the window's terms are read again
   without (`recency` with the stock), and weighed (`weigh`).
2. Each side (memories, messages below the window) is asked for the rows
   holding its own best terms (`best`, `hits`). They are ordered by the
   summed weights of the terms they hold, the newer first on ties, and the
   first `CANDIDATES` the owner may recall are read (`rows`).
3. They are scored and gated (`rank`); the matched clauses of the best are
   counted (`repeats_asked`), a repeated line lowered (`rerank`). The best
   messages bring their neighbours (`with_neighbours`), and what is left
   fills the budget (`fill`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from backthink.memory import phrases
from backthink.memory.scoring import (
    CANDIDATES,
    DF_CAP,
    Candidate,
    anchors,
    best,
    df_cap,
    fill,
    rank,
    rare,
    recency,
    repeats_asked,
    rerank,
    shared,
    stock,
    weigh,
    window_texts,
    with_neighbours,
)
from backthink.memory.terms import inside
from backthink.models import Message, Recalled

ROWS_BATCH = 999
"""Row ids read at most per `rows` call: no SQLite allows fewer variables in one statement."""

Side = Literal["memory", "message"]
"""The two kinds of rows recall reads: memories, and main-session messages."""


class Documents(NamedTuple):
    """The highest id of each side that a source's counts stand on (ids stand in for N)."""

    memory: int
    message: int


class RecallSource(Protocol):
    """What recall reads of one store, for one recall: counts, documents, hits, rows, neighbours.

    A source's index finds a term in a text as `terms.contains` does: a CJK
    2-gram anywhere, a latin stem at the start of a word.
    """

    def documents(self) -> Documents:
        """Per side, the highest id its counts and hits stand on."""
        ...

    def counts(self, side: Side, terms: Collection[str]) -> Mapping[str, int]:
        """How many rows of a side hold each term: every owner's, the window's too.

        Rows up to `documents` are counted. A count may stop past `DF_CAP`, at
        any number above it.
        """
        ...

    def hits(
        self, side: Side, terms: Sequence[str], *, owner_id: str, before: int | None
    ) -> Iterable[tuple[int, int]]:
        """(index in `terms`, row id) for each row the side's index finds holding a term.

        Every row `rows` would return for the owner is among them; rows it
        would not return (another owner's) may be too. Messages only below id
        `before`.
        """
        ...

    def rows(
        self, side: Side, ids: Sequence[int], *, owner_id: str, before: int | None
    ) -> Iterable[Candidate]:
        """The rows among `ids` the owner may recall, in any order.

        Memories of the owner; messages of the owner's main session, delivered,
        below id `before`.
        """
        ...

    def neighbours(
        self, anchors: Sequence[int], *, owner_id: str, before: int
    ) -> Mapping[int, Sequence[Candidate]]:
        """Per anchor message, the message just before and just after it, below id `before`.

        Adjacent in the anchor's session in (created_at, id) order, among its
        delivered messages.
        """
        ...


@dataclass(frozen=True)
class Query:
    """One recall asked of a store (built by `query`)."""

    owner_id: str
    window: tuple[Message, ...]
    limit: int
    max_chars: int
    before: int | None
    """Messages at or past this id are never recalled (None: no message is)."""
    exclude: frozenset[int]
    """Memory ids never recalled (the journal shows them already)."""
    recent: Mapping[str, float]
    """The window's terms and their recency weights (`recency`)."""


def query(
    owner_id: str,
    window: Sequence[Message],
    *,
    limit: int,
    max_chars: int,
    before_message_id: int | None = None,
    exclude: Collection[int] = (),
) -> Query | None:
    """The recall `MemoryStore.recall` is asked for; None when it can find nothing.

    Messages at or after `before_message_id` (default: the window's first) are
    never recalled. Nothing is found without terms or without room.
    """
    recent = recency(window)
    ids = [m.id for m in window if m.id is not None]
    before = before_message_id if before_message_id is not None else min(ids, default=None)
    if not recent or limit <= 0 or max_chars <= 0:
        return None
    return Query(owner_id, tuple(window), limit, max_chars, before, frozenset(exclude), recent)


def below(top: int, before: int | None) -> int:
    """The highest message id a recall stands on: the top, or the last one below the window."""
    return top if before is None else min(top, before - 1)


def recall(source: RecallSource, q: Query) -> list[Recalled]:
    """The memories and older main-session messages the window brings to mind, best first."""
    tops = source.documents()
    documents = max(tops.memory + below(tops.message, q.before), 1)
    df_memory, df_message = outside(source, q, tops, q.recent)
    df = {t: df_memory[t] + df_message[t] for t in q.recent}
    asked = phrases.window_phrases(window_texts(q.window), df, df_cap(documents))
    said = phrases.stock(_summed(outside(source, q, tops, asked)))
    recent = recency(q.window, said) if said else q.recent
    weights = weigh(recent, df, documents, q.window)
    memory_terms = best(weights, df_memory)
    message_terms = best(weights, df_message) if q.before is not None else []
    found = candidates(source, "memory", memory_terms, weights, q)
    found += candidates(source, "message", message_terms, weights, q)
    scored = rank(
        found, weights, q.window, df=df, documents=documents,
        specific=rare(df, documents), stock=said,
    )  # fmt: skip
    repeats = repeats_asked(scored, weights)
    scored = rerank(scored, weights, _summed(outside(source, q, tops, repeats)))
    if q.before is not None:
        near = source.neighbours(anchors(scored), owner_id=q.owner_id, before=q.before)
        common = stock(with_window(source, q, tops, shared(scored, near)), documents)
        scored = with_neighbours(scored, near, common)
    return fill(scored, q.window, limit=q.limit, max_chars=q.max_chars, stock=said)


def outside(
    source: RecallSource, q: Query, tops: Documents, terms: Collection[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """The document counts of `terms` among memories, and among messages outside the window.

    The counted window messages are taken out, so a term only the window
    holds weighs nothing. A count past DF_CAP stays past it. A phrase is
    counted as a term is.
    """
    on_memories = _capped(source.counts("memory", terms), terms)
    on_messages = _capped(source.counts("message", terms), terms)
    counted = [m.text for m in q.window if m.id is not None and m.id <= tops.message]
    shown = inside(counted, terms)
    return on_memories, {
        t: n if n > DF_CAP else max(n - shown[t], 0) for t, n in on_messages.items()
    }


def _summed(sides: tuple[dict[str, int], dict[str, int]]) -> dict[str, int]:
    """Each term's count on both sides."""
    on_memories, on_messages = sides
    return {t: n + on_messages[t] for t, n in on_memories.items()}


def with_window(
    source: RecallSource, q: Query, tops: Documents, terms: Collection[str]
) -> dict[str, int]:
    """The document counts of `terms` everywhere, the whole window's messages included."""
    on_memories = _capped(source.counts("memory", terms), terms)
    on_messages = _capped(source.counts("message", terms), terms)
    uncounted = inside([m.text for m in q.window if m.id is None or m.id > tops.message], terms)
    return {t: on_memories[t] + on_messages[t] + uncounted[t] for t in terms}


def candidates(
    source: RecallSource, side: Side, terms: Sequence[str], weights: Mapping[str, float], q: Query
) -> list[Candidate]:
    """The `CANDIDATES` rows of one side the owner may recall that hold the most weight.

    A row weighs the summed weights of the `terms` the index finds in it;
    the newer (higher id) comes first on ties. Rows the owner may not recall
    are passed over, so they are read in growing batches.
    """
    if not terms:
        return []
    before = q.before if side == "message" else None
    held: dict[int, int] = {}  # row id -> the bits of the terms it holds
    for i, row_id in source.hits(side, terms, owner_id=q.owner_id, before=before):
        held[row_id] = held.get(row_id, 0) | 1 << i
    if side == "memory":
        for row_id in q.exclude:
            held.pop(row_id, None)
    # One sum per set of terms, in the terms' own order: equal rows weigh equal
    # floats in any source. Few sets recur, so rows are grouped by weight.
    sums: dict[int, float] = {}
    by_weight: dict[float, list[int]] = {}
    for row_id, bits in held.items():
        if bits not in sums:
            sums[bits] = sum(weights[t] for i, t in enumerate(terms) if bits >> i & 1)
        by_weight.setdefault(sums[bits], []).append(row_id)
    order = [
        row for w in sorted(by_weight, reverse=True) for row in sorted(by_weight[w], reverse=True)
    ]
    kept: list[Candidate] = []
    start, batch = 0, CANDIDATES
    while start < len(order) and len(kept) < CANDIDATES:
        ids = order[start : start + batch]
        read = {c.id: c for c in source.rows(side, ids, owner_id=q.owner_id, before=before)}
        kept += [read[i] for i in ids if i in read]
        start, batch = start + batch, min(batch * 2, ROWS_BATCH)
    return kept[:CANDIDATES]


def _capped(counts: Mapping[str, int], terms: Iterable[str]) -> dict[str, int]:
    """The counts of `terms`, each at most DF_CAP + 1: past the cap, sources count differently."""
    return {t: min(counts.get(t, 0), DF_CAP + 1) for t in terms}
