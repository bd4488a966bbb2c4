"""Superseded turns are kept and never read: rounds, recall and the gate see past them.

An edit or a branch in a chat front-end marks the turns it left behind
`superseded` (the relay does, through `SqlSession.supersede`). The same
reads on SQLite, PostgreSQL and the in-memory stores leave them out; only
a listing that asks for every message shows them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from backthink.models import Message
from backthink.ports import MemoryStore, MessageStore
from backthink.store import (
    SqlMemoryStore,
    SqlSession,
    VolatileMemoryStore,
    VolatileMessageStore,
    open_store,
)

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
FACT = "我妹妹周六晚上有钢琴演奏会，在音乐厅"
ANSWER = "钢琴演奏会听起来很棒"
FILLER = [
    "早饭吃了包子",
    "地铁很挤",
    "下午开了两个会",
    "晚上看了会儿书",
    "今天有点冷",
    "买了新杯子",
]
HISTORY = [
    *[("user" if i % 2 == 0 else "assistant", f"{FILLER[i % 6]}，第{i}次") for i in range(40)],
    ("user", "今天加班到九点"),
    ("assistant", "辛苦了，早点休息"),
    ("user", FACT),
    ("assistant", ANSWER),
    ("user", "周末想去爬山"),
    ("assistant", "天气好的话很合适"),
]
WINDOW = [("user", "周六的钢琴演奏会我该穿什么"), ("assistant", "音乐厅的话穿得正式一点")]


@dataclass
class Stores:
    messages: MessageStore
    memories: MemoryStore
    supersede: Callable[[str, list[int]], Awaitable[int]]
    session: SqlSession | None = None


@pytest.fixture(params=["sqlite", "memory", "pg"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Empty stores: SQLite, in memory, PostgreSQL."""
    if request.param == "memory":
        messages = VolatileMessageStore()
        yield Stores(messages, VolatileMemoryStore(messages), messages.supersede)
        return
    url = f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    if request.param == "pg":
        url = request.getfixturevalue("pg_url")
    db, sql_messages, _ = await open_store(url)
    session = SqlSession(db)
    yield Stores(sql_messages, SqlMemoryStore(db), session.supersede, session)
    await db.dispose()


async def plant(stores: Stores) -> list[int]:
    """The owner's history and a window that recalls its fact; the ids of the fact's turn."""
    lines = [*HISTORY, *WINDOW]
    made = [
        Message(owner_id="o", role=role, text=text, created_at=T0 + timedelta(minutes=i))
        for i, (role, text) in enumerate(lines)
    ]
    await stores.messages.add_many(made)
    stored = await stores.messages.recent("o", len(lines))
    return [m.id for m in stored if m.id is not None and m.text in (FACT, ANSWER)]


async def recalled(stores: Stores) -> list[str]:
    """What a round with the newest window recalls."""
    if isinstance(stores.memories, SqlMemoryStore):
        await stores.memories.index()
    window = await stores.messages.recent("o", len(WINDOW))
    return [r.text for r in await stores.memories.recall("o", window, limit=5, max_chars=2000)]


async def test_rounds_recall_and_the_gate_never_read_a_superseded_turn(stores: Stores) -> None:
    """The history recalls the fact; once its turn is superseded, nothing reads that turn."""
    turn = await plant(stores)
    assert FACT in await recalled(stores)
    assert await stores.supersede("o", turn) == 2
    found = await recalled(stores)
    assert FACT not in found and ANSWER not in found

    every = [t for _, t in [*HISTORY, *WINDOW]]
    left = [t for t in every if t not in (FACT, ANSWER)]
    assert [m.text for m in await stores.messages.recent("o", 100)] == left
    view = await stores.messages.session_view("o", 100)
    assert [m.text for m in view.recent] == left
    activity = await stores.messages.owner_activity("o", messages=100, pushes=0)
    times = {at for _, at in activity.owner_messages}
    assert T0 + timedelta(minutes=len(HISTORY) - 4) not in times
    assert len(times) == sum(1 for r, _ in [*HISTORY, *WINDOW] if r == "user") - 1


async def test_only_a_listing_of_every_message_shows_them(stores: Stores) -> None:
    """The session's pages leave them out; `every=True` lists them, marked."""
    if stores.session is None:
        pytest.skip("the session's pages are read from SQL only")
    await stores.supersede("o", await plant(stores))
    plain = await stores.session.page("o", after=None, limit=100) or []
    every = await stores.session.page("o", after=None, limit=100, every=True) or []
    assert FACT not in [e.message.text for e in plain]
    marked = [e.to_json() for e in every if e.message.text == FACT]
    assert marked and marked[0]["superseded"] is True
    assert "superseded" not in plain[0].to_json()
    tail = await stores.session.recent("o", limit=100)
    assert FACT not in [e.message.text for e in tail]
