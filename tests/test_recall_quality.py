"""Recall quality on real SQLite and PostgreSQL: what comes back from long ago, and what never."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import test_memory as memory_tests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backthink.models import Memory, MemoryKind, Message
from backthink.store import Database, SqlMemoryStore, SqlMessageStore, open_store

pytestmark = pytest.mark.quality

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

FILLER = memory_tests.FILLER  # the same everyday lines as the store's tests

# (fact said long ago, where it was kept, a window message about it, one sharing at
# most one short term with it).
LABELLED = [
    (
        "我表姐欧阳雪下个月在青岛办婚礼",
        "message",
        "欧阳雪在青岛的婚礼我该送什么",
        "青岛的天气怎么样",
    ),
    (
        "高中同学诸葛明在深圳开了家猫咖啡馆",
        "memory",
        "诸葛明的猫咖啡馆生意怎么样",
        "咖啡馆今天人好多",
    ),
    ("奶奶的八十大寿定在腊月初八", "memory", "奶奶八十大寿那天要穿什么", "奶奶今天打电话了"),
    (
        "上周在西双版纳看到了野生亚洲象",
        "message",
        "西双版纳的亚洲象视频发我看看",
        "亚洲象是保护动物吗",
    ),
    (
        "my cousin Bartholomew is moving to Reykjavik in March",
        "message",
        "did Bartholomew find a flat in Reykjavik yet?",
        "March is almost over",
    ),
    (
        "the Kilimanjaro trek is booked for October",
        "memory",
        "should I buy new boots for the Kilimanjaro trek?",
        "are we still on for October?",
    ),
    (
        "I keep a sourdough starter named Gerald",
        "message",
        "Gerald the sourdough starter smells weird",
        "that bread smells weird",
    ),
]

MARKERS = ["[decision:push]", "[决定:push]", "[urgency:critical]", "[会话角色] ", "[发言归属] "]


def msg(text: str, *, at: datetime = T0, owner: str = "ana") -> Message:
    """A user message of `owner` at `at`."""
    return Message(owner_id=owner, role="user", text=text, created_at=at)


def note(text: str, *, at: datetime = T0, owner: str = "ana") -> Memory:
    """A note of `owner` written from the command line."""
    return Memory(owner_id=owner, kind=MemoryKind.NOTE, text=text, created_at=at, source="cli")


@dataclass
class Sql:
    """A SQLite or PostgreSQL database through the SQL stores."""

    db: Database
    memories: SqlMemoryStore
    messages: SqlMessageStore

    async def say(self, texts: list[str], *, start: datetime, owner: str = "ana") -> list[Message]:
        """Store messages one minute apart; return them with their ids."""
        return [
            await self.messages.add(msg(t, at=start + timedelta(minutes=i), owner=owner))
            for i, t in enumerate(texts)
        ]

    async def recall(self, window: list[Message], **options: object) -> list[tuple[str, str]]:
        """(kind, text) of what the window recalls, best first."""
        found = await self.memories.recall("ana", window, limit=5, max_chars=1200, **options)  # type: ignore[arg-type]
        return [(r.kind, r.text) for r in found]


@pytest.fixture(params=["sqlite", "pg"])
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sql]:
    """An empty database: a SQLite file, or a PostgreSQL database."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    if request.param == "pg":
        url = request.getfixturevalue("pg_url")
    db, messages, _ = await open_store(url)
    yield Sql(db, SqlMemoryStore(db), messages)
    await db.dispose()


def filler(n: int) -> list[str]:
    """`n` everyday messages that mention none of the facts."""
    return [FILLER[i % len(FILLER)] for i in range(n)]


async def plant_all(sql: Sql) -> list[Message]:
    """Every labelled fact, then 200 everyday messages; return the history."""
    said: list[Message] = []
    for i, (fact, where, _, _) in enumerate(LABELLED):
        at = T0 - timedelta(days=30 - i)
        if where == "memory":
            await sql.memories.add(note(fact, at=at))
        else:
            said.append(await sql.messages.add(msg(fact, at=at)))
    said += await sql.say(filler(200), start=T0 - timedelta(days=5))
    return said


@pytest.mark.parametrize(("fact", "where", "about", "unrelated"), LABELLED)
async def test_a_fact_200_messages_back_comes_back_only_when_talked_about(
    sql: Sql, fact: str, where: str, about: str, unrelated: str
) -> None:
    """A window about a fact recalls it first; a window near it in words recalls nothing."""
    await plant_all(sql)
    start = T0 + timedelta(days=1)
    other = await sql.say(["下午有点困", unrelated], start=start)
    assert await sql.recall(other) == []
    related = await sql.say(["下午有点困", about], start=start + timedelta(hours=1))
    assert (await sql.recall(related))[:1] == [(where, fact)]


async def test_window_messages_are_never_recalled(sql: Sql) -> None:
    """However well they match, messages of the window never come back."""
    await plant_all(sql)
    window = await sql.say(
        ["诸葛明的猫咖啡馆要装修", "诸葛明的猫咖啡馆生意怎么样"], start=T0 + timedelta(days=1)
    )
    found = await sql.memories.recall("ana", window, limit=5, max_chars=1200)
    assert found and not {r.id for r in found if r.kind == "message"} & {m.id for m in window}


async def test_terms_only_the_window_holds_do_not_crowd_out_older_matches(sql: Sql) -> None:
    """Rare words repeated across the window count for nothing; the older fact still wins."""
    await plant_all(sql)
    rare = "鹦鹉螺号潜艇驶过马里亚纳海沟底部的热泉喷口"  # in no older row
    window = await sql.say(
        ["欧阳雪在青岛的婚礼我该送什么", rare, rare + "吗", rare + "呀"],
        start=T0 + timedelta(days=1),
    )
    assert await sql.recall(window) == [("message", LABELLED[0][0])]


@pytest.mark.parametrize("marker", MARKERS)
async def test_footer_tokens_and_markers_stay_plain_text(sql: Sql, marker: str) -> None:
    """Footer tokens and attribution markers inside texts are recalled and searched verbatim."""
    kept = f"{marker}钢琴比赛记得带乐谱{marker}"
    said = f"{marker}下周六钢琴比赛的曲目是肖邦"
    await sql.memories.add(note(kept, at=T0 - timedelta(days=3)))
    await sql.messages.add(msg(said, at=T0 - timedelta(days=2)))
    await sql.say(filler(30), start=T0 - timedelta(days=1))
    window = await sql.say(
        [f"上次说的{marker}是什么意思", "钢琴比赛要带乐谱吗，曲目是肖邦吗"], start=T0
    )
    assert sorted(await sql.recall(window)) == [("memory", kept), ("message", said)]
    assert [m.text for m in await sql.memories.search("ana", marker)] == [kept]


_EXAMPLES = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_OWNERS = (f"p{i}" for i in itertools.count())


@pytest.fixture(scope="module", params=["sqlite", "pg"])
def shared_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One database for every generated example; each example is another owner."""
    if request.param == "pg":
        server = request.getfixturevalue("pg_server")
        return str(server.url(server.create_database()))
    return f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('recall') / 'bt.db'}"


@_EXAMPLES
@given(
    kept=st.text(max_size=80),
    said=st.text(max_size=80),
    window=st.lists(st.text(max_size=80), min_size=1, max_size=4),
    query=st.text(max_size=30),
)
def test_no_text_breaks_recall_or_search(
    shared_db: str, kept: str, said: str, window: list[str], query: str
) -> None:
    """Whatever the texts, recall and search run, and give back stored texts only."""
    if shared_db.startswith("postgresql"):
        # PostgreSQL text holds no NUL character: storing one is a StoreError there
        # (test_store pins that); a query may still hold one.
        kept, said = kept.replace("\0", ""), said.replace("\0", "")
        window = [t.replace("\0", "") for t in window]
    owner = next(_OWNERS)

    async def example() -> None:
        db, messages, _ = await open_store(shared_db)
        try:
            store = SqlMemoryStore(db)
            memory = await store.add(note(kept, owner=owner))
            await messages.add(msg(said, owner=owner, at=T0 - timedelta(days=1)))
            shown = [await messages.add(msg(t, owner=owner)) for t in window]
            found = await store.recall(owner, shown, limit=5, max_chars=1200)
            assert all(r.text in (kept, said) for r in found)  # short texts are never cut
            assert memory.id is not None
            rest = await store.recall(owner, shown, limit=5, max_chars=1200, exclude=[memory.id])
            assert all(r.kind == "message" for r in rest)
            hits = await store.search(owner, query)
            assert all(h.text == kept for h in hits)
        finally:
            await db.dispose()

    asyncio.run(example())


async def test_a_recalled_question_brings_its_answer(sql: Sql) -> None:
    """The reply to a recalled question comes along, though it shares no word with the window."""
    await sql.say(filler(100), start=T0 - timedelta(days=9))
    await sql.say(
        ["any tips for the Okavango canoe trip?", "bring malaria pills and a dry bag"],
        start=T0 - timedelta(days=8),
    )
    await sql.say(filler(100), start=T0 - timedelta(days=7))
    window = await sql.say(["下午有点困", "so excited, Okavango by canoe in August"], start=T0)
    found = await sql.recall(window)
    assert [text for _, text in found[:2]] == [
        "any tips for the Okavango canoe trip?",
        "bring malaria pills and a dry bag",
    ]
