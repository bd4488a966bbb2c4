"""Recall is one pipeline over three sources: SQLite, PostgreSQL and memory recall equal lists.

A mixed Chinese and English history (several hundred messages of the owner,
another owner's, another session's, undelivered pushes) and several hundred
memories are stored the same way in each store. Then windows of 20 new
messages come, each mentioning one fact or none, and each store recalls by
each window as a round does: the lists must be equal, item for item, in the
same order, to the in-memory store's.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import support.everyday as everyday

from backthink.config import MemorySettings
from backthink.memory.pipeline import Documents, Query, Side, candidates
from backthink.memory.scoring import CANDIDATES, Candidate
from backthink.memory.terms import contains
from backthink.models import Memory, MemoryKind, Message, Recalled
from backthink.store import (
    SqlMemoryStore,
    SqlMessageStore,
    VolatileMemoryStore,
    VolatileMessageStore,
    open_store,
)

OWNER = "ana"
OTHER = "bo"
SEED = 2026
BLOCK = 50  # messages of one language before the owner switches
BLOCKS = 12
FACTS = 8  # facts of each language
SHIPPED = MemorySettings()


@dataclass
class Stores:
    """A message store and the memory store recalling from it."""

    messages: SqlMessageStore | VolatileMessageStore
    memories: SqlMemoryStore | VolatileMemoryStore


def _in_memory() -> Stores:
    messages = VolatileMessageStore()
    return Stores(messages, VolatileMemoryStore(messages))


@pytest.fixture(params=["sqlite", "pg", "memory"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Empty stores: SQLite (a file), PostgreSQL, and a second in-memory pair."""
    if request.param == "memory":
        yield _in_memory()
        return
    url = f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    if request.param == "pg":
        url = request.getfixturevalue("pg_url")
    db, messages, _ = await open_store(url)
    yield Stores(messages, SqlMemoryStore(db))
    await db.dispose()


@pytest.fixture
def reference() -> Stores:
    """Empty in-memory stores: what the others are compared with."""
    return _in_memory()


def _facts() -> list[everyday.Fact]:
    return [*everyday.FACTS["zh"][:FACTS], *everyday.FACTS["en"][:FACTS]]


def _language(fact: int) -> everyday.Language:
    return "zh" if fact < FACTS else "en"


@dataclass
class Rows:
    """What every store is given, with ids: the history, the memories, then the windows."""

    messages: list[Message]
    memories: list[Memory]
    windows: list[list[Message]]
    mentions: list[int | None]


def _rows() -> Rows:
    """The same rows for every store, ids given: each store then holds exactly these."""
    rng = random.Random(SEED)
    facts = _facts()
    start = everyday.END - timedelta(days=20)
    ids = iter(range(1, 100_000))
    lines: list[everyday.Line] = []
    at = start
    for block in range(BLOCKS):
        language: everyday.Language = "zh" if block % 2 == 0 else "en"
        lines += everyday.filler(language, rng, BLOCK, at)
        at = lines[-1][2] + timedelta(hours=5)
    # Even facts are said in a message, odd ones kept as a memory, every fourth in both.
    for fact, said in enumerate(facts):
        if fact % 2 == 0 or fact % 4 == 3:
            place = (fact * 37) % len(lines)
            while lines[place][0] != "user":
                place += 1
            lines[place] = ("user", said.text, lines[place][2])
            # The companion's answer takes up a word of it: a neighbour to bring along.
            echo = said.text[:6] if fact < FACTS else " ".join(said.text.split()[:4])
            lines[place + 1] = ("assistant", f"noted: {echo}", lines[place + 1][2])
    messages = [
        Message(id=next(ids), owner_id=OWNER, role=r, text=t, created_at=when)
        for r, t, when in lines
    ]
    # Written later, with higher ids, but dated inside the history: another owner
    # saying the same things, another session, pushes that were never delivered.
    for i, (role, text, when) in enumerate(rng.sample(lines, 80)):
        messages.append(
            Message(id=next(ids), owner_id=OTHER, role=role, text=text, created_at=when)
        )
        if i % 4 == 0:
            side = "side" if i % 8 == 0 else "main"
            messages.append(
                Message(
                    id=next(ids),
                    owner_id=OWNER,
                    session_id=side,
                    role="assistant",
                    text=text,
                    created_at=when + timedelta(seconds=30),
                    undelivered=side == "main",
                    origin="proactive",
                )
            )
    memories = _memories(rng, facts, start, ids)
    windows, mentions = _windows(rng, facts, messages[-1].created_at, ids)
    return Rows(messages, memories, windows, mentions)


def _memories(
    rng: random.Random, facts: list[everyday.Fact], start: datetime, ids: Iterator[int]
) -> list[Memory]:
    """300 everyday memories of both owners, and the facts kept as notes."""
    kinds = (MemoryKind.THOUGHT, MemoryKind.NOTE, MemoryKind.THOUGHT, MemoryKind.PROFILE)
    out: list[Memory] = []
    for i in range(300):
        language: everyday.Language = "zh" if i % 3 else "en"
        (_, text, _) = everyday.filler(language, rng, 1, start)[0]
        owner = OTHER if i % 10 == 9 else OWNER
        # Some memories share one time: the order then rests on the id.
        when = start + timedelta(hours=i // 3)
        out.append(_memory(next(ids), owner, kinds[i % 4], text, when))
    for fact, said in enumerate(facts):
        if fact % 2 == 1 or fact % 4 == 0:
            when = start + timedelta(days=fact)
            out.append(_memory(next(ids), OWNER, MemoryKind.NOTE, said.text, when))
    return out


def _memory(memory_id: int, owner: str, kind: MemoryKind, text: str, at: datetime) -> Memory:
    return Memory(id=memory_id, owner_id=owner, kind=kind, text=text, created_at=at, source="chat")


def _windows(
    rng: random.Random, facts: list[everyday.Fact], after: datetime, ids: Iterator[int]
) -> tuple[list[list[Message]], list[int | None]]:
    """Per fact, 20 new messages mentioning it among the newest three; then a quiet 20."""
    order = list(range(len(facts)))
    rng.shuffle(order)
    windows: list[list[Message]] = []
    mentions: list[int | None] = []
    at = max(after, everyday.END) + timedelta(hours=1)
    for fact in order:
        for mentioned in (fact, None):
            lines = everyday.filler(_language(fact), rng, everyday.WINDOW, at)
            if mentioned is not None:
                place = everyday.WINDOW - 1 - rng.randint(0, 2)
                lines[place] = ("user", facts[mentioned].mention, lines[place][2])
            windows.append(
                [
                    Message(id=next(ids), owner_id=OWNER, role=r, text=t, created_at=when)
                    for r, t, when in lines
                ]
            )
            mentions.append(mentioned)
            at = lines[-1][2] + timedelta(hours=2)
    return windows, mentions


async def _recalled(stores: Stores, rows: Rows) -> list[list[Recalled]]:
    """Store the rows, then recall by each window as a round does; every window's list."""
    await stores.messages.add_many(rows.messages)
    for memory in rows.memories:
        await stores.memories.add(memory)
    out: list[list[Recalled]] = []
    for i, window in enumerate(rows.windows):
        await stores.messages.add_many(window)
        shown = await stores.messages.recent(OWNER, everyday.WINDOW)
        # Now and then the journal shows a memory already: it is never recalled.
        exclude = {m.id for m in rows.memories[i : i + 40 : 7] if m.id is not None}
        out.append(
            await stores.memories.recall(
                OWNER, shown, limit=SHIPPED.recall, max_chars=SHIPPED.max_chars, exclude=exclude
            )
        )
    return out


async def test_every_source_recalls_what_the_others_do(stores: Stores, reference: Stores) -> None:
    """SQLite, PostgreSQL and memory recall equal lists (items, scores, order) for each window."""
    rows = _rows()
    expected = await _recalled(reference, rows)
    got = await _recalled(stores, rows)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"window {i} (fact {rows.mentions[i]})"


async def test_the_shared_history_recalls_facts_neighbours_and_both_kinds(
    reference: Stores,
) -> None:
    """The history is realistic enough to compare on: facts, neighbours, memories, messages."""
    rows = _rows()
    assert len(rows.messages) >= 600 and len(rows.memories) >= 300
    found = await _recalled(reference, rows)
    facts = _facts()
    hits = sum(
        any(r.text == facts[fact].text for r in recalled)
        for recalled, fact in zip(found, rows.mentions, strict=True)
        if fact is not None
    )
    items = [r for recalled in found for r in recalled]
    assert hits >= len(facts) // 2, hits
    assert {r.kind for r in items} == {"memory", "message"}
    assert any(r.text.startswith("noted: ") for r in items), "no neighbour came along"
    assert not [r for r in items if r.origin == "proactive"], "an undelivered push came back"


class _SharedIndex:
    """A source whose index holds every owner's memories, as SQLite's words index does."""

    def __init__(self, memories: list[Memory]) -> None:
        self.memories = memories
        self.asked: list[int] = []

    def documents(self) -> Documents:
        return Documents(len(self.memories), 0)

    def counts(self, side: Side, terms: Collection[str]) -> Mapping[str, int]:
        return {t: sum(contains(m.text, t) for m in self.memories) for t in terms}

    def hits(
        self, side: Side, terms: Sequence[str], *, owner_id: str, before: int | None
    ) -> Iterable[tuple[int, int]]:
        return [
            (i, m.id or 0)
            for m in self.memories
            for i, t in enumerate(terms)
            if contains(m.text, t)
        ]

    def rows(
        self, side: Side, ids: Sequence[int], *, owner_id: str, before: int | None
    ) -> Iterable[Candidate]:
        self.asked.append(len(ids))
        return [
            Candidate("memory", m.id or 0, m.text, m.created_at, m.kind)
            for m in self.memories
            if m.id in set(ids) and m.owner_id == owner_id
        ]

    def neighbours(
        self, anchors: Sequence[int], *, owner_id: str, before: int
    ) -> Mapping[int, Sequence[Candidate]]:
        return {}


def test_other_owners_rows_never_crowd_out_the_owners() -> None:
    """Rows the owner may not recall are passed over, however many outweigh the owner's."""
    at = everyday.END
    crowd = [
        _memory(i, OTHER, MemoryKind.NOTE, "Bartholomew Reykjavik glacier", at)
        for i in range(1, 3 * CANDIDATES + 11)
    ]
    mine = 3 * CANDIDATES + 11
    own = [
        _memory(mine, OWNER, MemoryKind.NOTE, "Bartholomew Reykjavik", at),
        _memory(mine + 1, OWNER, MemoryKind.NOTE, "Bartholomew", at),
    ]
    source = _SharedIndex([*crowd, *own])
    window = (Message(id=1000, owner_id=OWNER, role="user", text="x", created_at=at),)
    q = Query(OWNER, window, 5, 1200, None, frozenset({mine + 1}), {})
    weights = {"bartholomew": 2.0, "reykjavik": 1.0, "glacier": 0.5}
    found = candidates(source, "memory", list(weights), weights, q)
    assert [c.id for c in found] == [mine]
    assert source.asked == [CANDIDATES, 2 * CANDIDATES, 11], "read in growing batches"


async def _stock_recall(stores: Stores, said_before: int) -> list[str]:
    """Recall by a window saying a line `said_before` times in the history before it."""
    at = everyday.END
    line = "Living the dream obviously"
    history = [line] * said_before + ["Had a dream about living in Lisbon, obviously"]
    texts = [*history, line]
    await stores.messages.add_many(
        [
            Message(
                id=i + 1,
                owner_id=OWNER,
                role="user",
                text=text,
                created_at=at + timedelta(minutes=i),
            )
            for i, text in enumerate(texts)
        ]
    )
    shown = await stores.messages.recent(OWNER, everyday.WINDOW)
    window = shown[-1:]
    found = await stores.memories.recall(
        OWNER, window, limit=SHIPPED.recall, max_chars=SHIPPED.max_chars
    )
    return [r.text for r in found]


@pytest.mark.parametrize("said_before", [0, 2])
async def test_a_line_said_before_asks_nothing_on_every_source(
    stores: Stores, said_before: int
) -> None:
    """A window clause said twice before is a stock phrase: its words recall nothing, anywhere."""
    found = await _stock_recall(stores, said_before)
    fact = "Had a dream about living in Lisbon, obviously"
    assert (fact in found) == (said_before == 0), found
