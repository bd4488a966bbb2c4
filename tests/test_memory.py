"""Long-term memory: the store contract over SQL and memory, recall quality, the schema."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from backthink.errors import StoreError
from backthink.memory import scoring as recall
from backthink.memory import terms
from backthink.models import Memory, MemoryKind, Message
from backthink.store import (
    SqlMemoryStore,
    SqlMessageStore,
    VolatileMemoryStore,
    VolatileMessageStore,
    create_engine,
    fulltext,
    migrate,
    open_store,
)
from backthink.store.migrator import alembic_config

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOSTILE = ["don't", "a-b", "AND", "c++", 'say "hi', "col:abc", "好的 OR", "5.0", "NEAR(", "*", ")"]

FILLER = [
    "今天午饭吃了拉面，味道还不错",
    "下班路上有点堵车，回家晚了",
    "晚上看了一集纪录片，讲深海鱼类",
    "明天早上要开会，得早点睡",
    "the weather turned cold again today",
    "I finished reading that novel about sailors",
    "猫今天把花盆打翻了，真头疼",
    "we ordered dumplings for dinner tonight",
    "周末想去公园散散步，晒晒太阳",
    "my laptop battery drains quickly lately",
]


def msg(text: str, *, at: datetime = T0, owner: str = "ana", **fields: object) -> Message:
    """A user message of `owner` at `at`."""
    return Message(owner_id=owner, role="user", text=text, created_at=at, **fields)  # type: ignore[arg-type]


def note(
    text: str, *, at: datetime = T0, owner: str = "ana", kind: MemoryKind = MemoryKind.NOTE
) -> Memory:
    """A memory of `owner` written from the command line."""
    return Memory(owner_id=owner, kind=kind, text=text, created_at=at, source="cli")


@dataclass
class Stores:
    """One memory store and the message store it recalls from."""

    memories: SqlMemoryStore | VolatileMemoryStore
    messages: SqlMessageStore | VolatileMessageStore
    path: Path | None

    async def history(self, texts: list[str], *, start: datetime = T0) -> list[Message]:
        """Store messages one minute apart; return them with their ids."""
        return [
            await self.messages.add(msg(t, at=start + timedelta(minutes=i)))
            for i, t in enumerate(texts)
        ]


@pytest.fixture(params=["sql", "memory", "pg"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Each MemoryStore implementation, empty, with its message store.

    SQLite (`sql`, its file in `path`), in memory, and PostgreSQL (`pg`, no path).
    """
    if request.param == "memory":
        messages = VolatileMessageStore()
        yield Stores(VolatileMemoryStore(messages), messages, None)
        return
    path: Path | None = tmp_path / "bt.db"
    url = f"sqlite+aiosqlite:///{path}"
    if request.param == "pg":
        path, url = None, request.getfixturevalue("pg_url")
    db, sql_messages, _ = await open_store(url)
    yield Stores(SqlMemoryStore(db), sql_messages, path)
    await db.dispose()


def filler(n: int) -> list[str]:
    """`n` everyday messages that mention neither the recital nor anything like it."""
    return [FILLER[i % len(FILLER)] for i in range(n)]


# The contract.


async def test_add_returns_the_memory_with_an_id_and_utc_time(stores: Stores) -> None:
    """A stored memory comes back with a new id and its instant in UTC."""
    local = T0.astimezone(timezone(timedelta(hours=8)))
    stored = await stores.memories.add(note("likes jasmine tea", at=local))
    assert stored.id is not None and stored.created_at == T0
    (listed,) = await stores.memories.list("ana")
    assert listed == stored and listed.created_at.tzinfo is not None


async def test_list_is_newest_first_per_owner_kind_and_limit(stores: Stores) -> None:
    """list walks an owner's memories newest first, every kind unless one is asked for."""
    m = stores.memories
    await m.add(note("a", at=T0))
    await m.add(note("b", at=T0 + timedelta(minutes=1), kind=MemoryKind.PROFILE))
    await m.add(note("c", at=T0 + timedelta(minutes=2), kind=MemoryKind.THOUGHT))
    await m.add(note("other owner", owner="bo"))
    assert [x.text for x in await m.list("ana")] == ["c", "b", "a"]
    assert [x.text for x in await m.list("ana", kind=MemoryKind.PROFILE)] == ["b"]
    assert [x.text for x in await m.list("ana", limit=2)] == ["c", "b"]
    assert [x.text for x in await m.latest_thoughts("ana", 5)] == ["c"]
    with pytest.raises(ValueError, match="negative"):
        await m.list("ana", limit=-1)


async def test_forget_removes_only_that_owners_memory(stores: Stores) -> None:
    """forget is True once for an owner's memory, False for a missing or another owner's one."""
    kept = await stores.memories.add(note("keep me"))
    gone = await stores.memories.add(note("forget me"))
    assert gone.id is not None and kept.id is not None
    assert not await stores.memories.forget("bo", gone.id)
    assert await stores.memories.forget("ana", gone.id)
    assert not await stores.memories.forget("ana", gone.id)
    assert [x.text for x in await stores.memories.list("ana")] == ["keep me"]


async def test_memories_and_messages_are_read_back_by_id_per_owner(stores: Stores) -> None:
    """get_many and by_ids return an owner's rows with those ids, nothing of another owner."""
    a = await stores.memories.add(note("a", at=T0))
    b = await stores.memories.add(note("b", at=T0 + timedelta(minutes=1)))
    other = await stores.memories.add(note("other owner", owner="bo"))
    assert a.id is not None and b.id is not None and other.id is not None
    found = await stores.memories.get_many("ana", [a.id, b.id, other.id, 9999])
    assert [m.text for m in found] == ["b", "a"]
    assert await stores.memories.get_many("ana", []) == []
    first, second = await stores.history(["one", "two"])
    theirs = await stores.messages.add(msg("theirs", owner="bo"))
    assert first.id is not None and second.id is not None and theirs.id is not None
    read = await stores.messages.by_ids("ana", [second.id, first.id, theirs.id])
    assert [m.text for m in read] == ["one", "two"]
    assert await stores.messages.by_ids("ana", []) == []


async def test_search_finds_memories_holding_every_word(stores: Stores) -> None:
    """search matches every word, ignoring case, short CJK words included, newest first."""
    m = stores.memories
    await m.add(note("我妹妹下周六钢琴比赛", at=T0))
    await m.add(note("My sister's Piano recital is next Saturday", at=T0 + timedelta(minutes=1)))
    await m.add(note("钢琴老师姓王", at=T0 + timedelta(minutes=2)))
    await m.add(note("钢琴比赛 of another owner", owner="bo"))
    assert [x.text for x in await m.search("ana", "钢琴比赛")] == ["我妹妹下周六钢琴比赛"]
    assert [x.text for x in await m.search("ana", "钢琴")] == [
        "钢琴老师姓王",
        "我妹妹下周六钢琴比赛",
    ]
    assert [x.text[:10] for x in await m.search("ana", "piano RECITAL")] == ["My sister'"]
    assert await m.search("ana", "piano violin") == []
    assert await m.search("ana", "   ") == []


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_search_queries_are_text(stores: Stores, query: str) -> None:
    """Query syntax in a search is searched for as text, never an error."""
    await stores.memories.add(note(f"we said {query} yesterday"))
    found = await stores.memories.search("ana", query)
    assert [x.text for x in found] == [f"we said {query} yesterday"]


# Recall quality: a fact from long ago, a window that talks about it or not.

ZH_FACT = "我妹妹下周六钢琴比赛，她有点紧张"
EN_FACT = "my sister's piano recital is next Saturday"


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (["周六的钢琴比赛你妹妹准备好了吗"], ZH_FACT),
        (["Is the piano recital still on for Saturday?"], EN_FACT),
        (["明天还要加班", "钢琴比赛那天我要去现场"], ZH_FACT),
        (["晚饭做了番茄炒蛋", "我想去海边旅行"], None),
        (["the train was late again this morning"], None),
        (["下周六我有空"], None),
    ],
)
async def test_a_fact_from_long_ago_is_recalled_only_when_the_window_is_about_it(
    stores: Stores, window: list[str], expected: str | None
) -> None:
    """A memory and a message 200 messages back come to mind for a related window only."""
    await stores.memories.add(note(ZH_FACT, at=T0 - timedelta(days=9)))
    await stores.messages.add(msg(EN_FACT, at=T0 - timedelta(days=9)))
    await stores.history(filler(200))
    shown = await stores.history(window, start=T0 + timedelta(days=1))
    found = await stores.memories.recall("ana", shown, limit=5, max_chars=1200)
    assert [r.text for r in found][:1] == ([expected] if expected else [])
    if expected is None:
        assert found == []


async def test_window_messages_are_never_recalled(stores: Stores) -> None:
    """Messages at or after the window's first are left out, even when they match best."""
    await stores.history(filler(20))
    shown = await stores.history(
        ["钢琴比赛的曲目定了吗", "钢琴比赛在周六上午"], start=T0 + timedelta(days=1)
    )
    assert await stores.memories.recall("ana", shown, limit=5, max_chars=1200) == []
    older = await stores.memories.recall("ana", shown[1:], limit=5, max_chars=1200)
    assert [(r.kind, r.id) for r in older] == [("message", shown[0].id)]


async def test_a_memory_repeating_the_window_is_dropped(stores: Stores) -> None:
    """A memory near-identical to a window message adds nothing and is not recalled."""
    await stores.memories.add(note(ZH_FACT))
    shown = await stores.history([ZH_FACT], start=T0 + timedelta(days=1))
    assert await stores.memories.recall("ana", shown, limit=5, max_chars=1200) == []


async def test_near_duplicates_among_results_are_recalled_once(stores: Stores) -> None:
    """Two memories saying the same thing come back as one."""
    await stores.memories.add(note(ZH_FACT, at=T0))
    await stores.memories.add(note(ZH_FACT + "。", at=T0 + timedelta(minutes=1)))
    shown = await stores.history(["钢琴比赛准备得怎样"], start=T0 + timedelta(days=1))
    found = await stores.memories.recall("ana", shown, limit=5, max_chars=1200)
    assert len(found) == 1 and found[0].kind == "memory"


async def test_recall_stays_within_max_chars_and_limit(stores: Stores) -> None:
    """The recalled texts together never exceed max_chars, nor their count the limit."""
    for i, extra in enumerate(
        ["她练了很久", "曲目是肖邦", "老师很严格", "地点在市中心", "要穿礼服"]
    ):
        await stores.memories.add(note(f"钢琴比赛：{extra}" * 3, at=T0 + timedelta(minutes=i)))
    shown = await stores.history(["钢琴比赛快到了"], start=T0 + timedelta(days=1))
    found = await stores.memories.recall("ana", shown, limit=5, max_chars=40)
    assert found and sum(len(r.text) for r in found) <= 40
    assert len(await stores.memories.recall("ana", shown, limit=2, max_chars=1200)) <= 2


async def test_other_owners_are_never_recalled(stores: Stores) -> None:
    """Another owner's memories and messages never come back."""
    await stores.memories.add(note(ZH_FACT, owner="bo"))
    await stores.messages.add(msg(EN_FACT, owner="bo"))
    shown = await stores.history(["钢琴比赛 piano recital Saturday"], start=T0 + timedelta(days=1))
    assert await stores.memories.recall("ana", shown, limit=5, max_chars=1200) == []


async def test_a_forgotten_memory_is_neither_searched_nor_recalled(stores: Stores) -> None:
    """Once forgotten, a memory is found by no search and no recall."""
    gone = await stores.memories.add(note(ZH_FACT))
    assert gone.id is not None
    shown = await stores.history(["钢琴比赛准备得怎样"], start=T0 + timedelta(days=1))
    assert len(await stores.memories.recall("ana", shown, limit=5, max_chars=1200)) == 1
    assert await stores.memories.forget("ana", gone.id)
    assert await stores.memories.search("ana", "钢琴比赛") == []
    assert await stores.memories.recall("ana", shown, limit=5, max_chars=1200) == []


@pytest.mark.parametrize("text", HOSTILE)
async def test_hostile_memory_text_stays_text(stores: Stores, text: str) -> None:
    """Memories and windows full of query syntax recall like any other text."""
    await stores.memories.add(note(f"钢琴比赛 {text} 记得带乐谱"))
    shown = await stores.history([f"{text} 钢琴比赛要带乐谱吗"], start=T0 + timedelta(days=1))
    found = await stores.memories.recall("ana", shown, limit=5, max_chars=1200)
    assert [r.text for r in found] == [f"钢琴比赛 {text} 记得带乐谱"]


# SQLite specifics.


async def test_a_forgotten_text_leaves_no_token_in_the_index(tmp_path: Path) -> None:
    """After forget, neither index holds any of the text's trigrams or words."""
    path = tmp_path / "bt.db"
    db, _, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    store = SqlMemoryStore(db)
    secret = "瑞士银行保险箱密码"
    for i in range(30):
        await store.add(note(f"平常的记录{i}号，和别的都不一样"))
    gone = await store.add(note(secret))
    assert gone.id is not None and await store.search("ana", secret)
    await store.forget("ana", gone.id)
    await db.dispose()
    with sqlite3.connect(path) as raw:
        vocab = {t for (t,) in raw.execute("SELECT term FROM memory_fts_vocab")}
        blobs = b"".join(bytes(b) for (b,) in raw.execute("SELECT block FROM memory_fts_data") if b)
        left = raw.execute("SELECT count(*) FROM memory WHERE text = ?", (secret,)).fetchone()
        raw.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, memory_words, row)")
        words = {t for (t,) in raw.execute("SELECT term FROM temp.words")}
        found = raw.execute(
            "SELECT count(*) FROM memory_words WHERE memory_words MATCH ?",
            (terms.words_query(terms.terms_of(secret)),),
        ).fetchone()
    assert not vocab & set(terms.trigrams(secret))
    assert all(t.encode() not in blobs for t in terms.trigrams(secret))
    assert not words & set(terms.terms_of(secret)) and found == (0,)
    assert left == (0,)
    assert secret.encode() not in path.read_bytes()


async def test_a_bad_kind_is_refused_by_the_database(tmp_path: Path) -> None:
    """The check constraint refuses a kind outside note, profile and thought."""
    path = tmp_path / "bt.db"
    db, _, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    await db.dispose()
    with sqlite3.connect(path) as raw, pytest.raises(sqlite3.IntegrityError, match="ck_memory"):
        raw.execute(
            "INSERT INTO memory (owner_id, kind, text, created_at, source)"
            " VALUES ('ana', 'wish', 'x', '2026-03-01 12:00:00.000000', 'chat')"
        )


async def test_rows_the_chat_app_writes_are_indexed_by_the_daemon(tmp_path: Path) -> None:
    """Rows another program inserts are indexed at the next search or recall; no trigger exists."""
    path = tmp_path / "bt.db"
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    store = SqlMemoryStore(db)
    with sqlite3.connect(path) as raw:
        triggers = raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        raw.execute(
            "INSERT INTO memory (owner_id, kind, text, created_at, source)"
            " VALUES ('ana', 'note', '喜欢茉莉花茶', '2026-03-01 12:00:00.000000', 'chat')"
        )
        raw.execute(
            "INSERT INTO message (owner_id, session_id, role, text, origin, created_at)"
            " VALUES ('ana', 'main', 'user', ?, 'chat', '2026-02-01 00:00:00.000000')",
            (EN_FACT,),
        )
    assert triggers == []
    assert [m.text for m in await store.search("ana", "茉莉花")] == ["喜欢茉莉花茶"]
    shown = [await messages.add(msg("how did the piano recital go on Saturday?"))]
    found = await store.recall("ana", shown, limit=5, max_chars=1200)
    assert [(r.kind, r.text) for r in found] == [("message", EN_FACT)]
    await db.dispose()


async def test_rows_the_chat_app_edits_or_deletes_are_never_returned_stale(tmp_path: Path) -> None:
    """An edited row is found by no word it lost; a deleted one, or a reused id, by nothing."""
    path = tmp_path / "bt.db"
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    store = SqlMemoryStore(db)
    await store.add(note("喜欢茉莉花茶"))
    fact = await messages.add(msg(EN_FACT, at=T0 - timedelta(days=3)))
    await stores_history(messages, filler(5))
    shown = [await messages.add(msg("is the piano recital still on Saturday?"))]
    assert await store.search("ana", "茉莉花")
    assert [r.id for r in await store.recall("ana", shown, limit=5, max_chars=1200)] == [fact.id]
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE memory SET text = '喜欢乌龙茶'")
        raw.execute("DELETE FROM message WHERE id = ?", (fact.id,))
    assert await store.search("ana", "茉莉花") == []
    assert await store.recall("ana", shown, limit=5, max_chars=1200) == []
    # The newest message is deleted and its id taken again by another text.
    newest = shown[0].id
    with sqlite3.connect(path) as raw:
        raw.execute("DELETE FROM message WHERE id = ?", (newest,))
        raw.execute(
            "INSERT INTO message (id, owner_id, session_id, role, text, origin, created_at)"
            " VALUES (?, 'ana', 'main', 'user', '今天午饭吃了拉面', 'chat',"
            " '2026-03-02 00:00:00.000000')",
            (newest,),
        )
    again = [await messages.add(msg("the piano recital on Saturday, again"))]
    assert await store.recall("ana", again, limit=5, max_chars=1200) == []
    await db.dispose()


async def test_a_backlog_is_indexed_a_batch_per_recall_and_whole_by_search(
    tmp_path: Path,
) -> None:
    """A recall indexes at most one batch of a long backlog; a search indexes all of it."""
    path = tmp_path / "bt.db"
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    store = SqlMemoryStore(db)
    backlog = fulltext.CATCH_UP_ROWS * 2 + 7
    with sqlite3.connect(path) as raw:
        raw.executemany(
            "INSERT INTO message (owner_id, session_id, role, text, origin, created_at)"
            " VALUES ('ana', 'main', 'user', ?, 'chat', '2026-02-01 00:00:00.000000')",
            [(f"{text} {i}",) for i, text in enumerate(filler(backlog))],
        )

    def indexed() -> int:
        with sqlite3.connect(path) as raw:
            return int(raw.execute("SELECT count(*) FROM message_fts_docsize").fetchone()[0])

    shown = [await messages.add(msg("钢琴比赛准备得怎样"))]
    await store.recall("ana", shown, limit=5, max_chars=1200)
    assert indexed() == fulltext.CATCH_UP_ROWS
    await store.search("ana", "钢琴比赛")
    assert indexed() == backlog + 1
    await db.dispose()


async def stores_history(
    messages: SqlMessageStore | VolatileMessageStore, texts: list[str]
) -> None:
    """Store messages one minute apart, from T0."""
    for i, text in enumerate(texts):
        await messages.add(msg(text, at=T0 + timedelta(minutes=i)))


async def test_excluded_memories_are_not_recalled(stores: Stores) -> None:
    """A memory the journal already shows (its id excluded) is never recalled."""
    shown_first = await stores.memories.add(note(ZH_FACT, at=T0))
    other = await stores.memories.add(note("钢琴比赛的曲目是肖邦的夜曲", at=T0))
    assert shown_first.id is not None and other.id is not None
    window = await stores.history(["钢琴比赛准备得怎样"], start=T0 + timedelta(days=1))
    both = await stores.memories.recall("ana", window, limit=5, max_chars=1200)
    assert {r.id for r in both} == {shown_first.id, other.id}
    found = await stores.memories.recall(
        "ana", window, limit=5, max_chars=1200, exclude=[shown_first.id]
    )
    assert [r.id for r in found] == [other.id]


async def test_the_same_round_gets_the_same_recall_until_something_changes(
    tmp_path: Path,
) -> None:
    """An unchanged window recalls an equal list; a forget or a deleted row is seen at once."""
    path = tmp_path / "bt.db"
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    store = SqlMemoryStore(db)
    memory = await store.add(note(ZH_FACT, at=T0 - timedelta(days=2)))
    fact = await messages.add(msg("钢琴比赛那天我们去吃了火锅", at=T0 - timedelta(days=1)))
    assert memory.id is not None
    window = [await messages.add(msg("钢琴比赛准备得怎样"))]
    first = await store.recall("ana", window, limit=5, max_chars=1200)
    assert {r.id for r in first} == {memory.id, fact.id}
    assert await store.recall("ana", window, limit=5, max_chars=1200) == first
    with sqlite3.connect(path) as raw:
        raw.execute("DELETE FROM message WHERE id = ?", (fact.id,))
    assert [r.id for r in await store.recall("ana", window, limit=5, max_chars=1200)] == [memory.id]
    other = SqlMemoryStore(db)  # another process, as `backthink memory forget` is
    assert await other.forget("ana", memory.id)
    assert await store.recall("ana", window, limit=5, max_chars=1200) == []
    await db.dispose()


async def test_upgrading_to_memory_keeps_rows_and_indexes_old_messages(tmp_path: Path) -> None:
    """A database at 0006 keeps its messages through 0007, and they become recallable."""
    from alembic import command

    path = tmp_path / "bt.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0006"))
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO message (owner_id, session_id, role, text, origin, created_at)"
            f" VALUES ('ana', 'main', 'user', '{EN_FACT.replace(chr(39), chr(39) * 2)}',"
            " 'chat', '2026-02-01 00:00:00.000000')"
        )
    await migrate(engine)
    await engine.dispose()
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    shown = [await messages.add(msg("how did the piano recital go on Saturday?"))]
    found = await SqlMemoryStore(db).recall("ana", shown, limit=5, max_chars=1200)
    await db.dispose()
    assert [(r.kind, r.text) for r in found] == [("message", EN_FACT)]


# The pure term logic.


def test_terms_are_cjk_bigrams_and_latin_stems() -> None:
    """CJK runs give 2-grams; latin words of three letters or more their stems, lowercased."""
    assert terms.terms_of("钢琴比赛 Piano day, c++ 2026 好的") == [
        "钢琴",
        "琴比",
        "比赛",
        "好的",
        "piano",
        "day",
        "2026",
    ]
    assert terms.terms_of("don't a-b AND OR") == []
    assert terms.terms_of("Painting, painted and paints; hiking") == ["paint", "hik"]


def test_a_stem_matches_at_a_word_start_only() -> None:
    """A latin term is found where a word begins with it, in any of its forms."""
    assert terms.contains("We went HIKING yesterday", "hik")
    assert not terms.contains("the chiking place", "hik")
    assert terms.contains("钢琴比赛好玩", "琴比")
    assert terms.contains("打pokemon", "pokemon")


def test_the_words_index_holds_words_and_cjk_bigrams() -> None:
    """The words index reads latin words whole and CJK runs as overlapping 2-grams."""
    assert terms.index_text("我去Paris看钢琴比赛!") == "我去 Paris 看钢 钢琴 琴比 比赛"
    assert terms.words_query(["钢琴", "paint"]) == '"钢琴" OR "paint"*'


def test_a_term_is_quoted_as_one_string() -> None:
    """Quotes inside a term are doubled, so the term is one FTS5 string."""
    assert terms.quote('say "hi') == '"say ""hi"'
    assert terms.match_query(["ab c", "好的"]) == '"ab c" OR "好的"'


@pytest.mark.parametrize("text", HOSTILE)
def test_no_text_breaks_a_match_query(text: str) -> None:
    """A MATCH built from any text, or a quoted hostile string itself, runs without error."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='trigram')")
    conn.execute("INSERT INTO t VALUES (?)", (f"x {text} y",))
    for query in (terms.match_query(terms.terms_of(text) or ["none"]), terms.quote(text)):
        conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (query,)).fetchone()


def test_weak_matches_are_gated() -> None:
    """One short term, or one 3-character CJK string, is not enough; more, or a long word, are."""
    assert not recall.strong(["钢琴"])
    assert not recall.strong(["下周", "周六"])
    assert not recall.strong(["piano"])
    assert recall.strong(["钢琴", "琴比", "比赛"])
    assert recall.strong(["钢琴", "比赛"])
    assert recall.strong(["piano", "sister"])
    assert recall.strong(["recital"])
    assert recall.strong(["piano"], specific={"piano"})


def test_a_short_rare_word_is_enough_only_as_a_name_or_number() -> None:
    """A name past a sentence's first word, or a number, counts as specific; a plain word not."""
    assert terms.named("I just got a new addition, this is Max!", "max")
    assert terms.named("we met in 2019", "2019")
    assert not terms.named("Max is here", "max")
    assert not terms.named("the trek is booked", "trek")


def test_a_term_only_the_window_holds_weighs_nothing() -> None:
    """Terms with no document outside the window, or in too many, are dropped."""
    weights = recall.weigh(
        {"钢琴": 1.0, "新词": 1.0, "常见": 1.0}, {"钢琴": 2, "常见": 5000}, 10_000
    )
    assert list(weights) == ["钢琴"]


def test_recency_weighs_newer_messages_more() -> None:
    """A term of the newest message weighs 1.0, one a message older RECENCY_DECAY."""
    window = [msg("钢琴比赛"), msg("piano")]
    older = recall.RECENCY_DECAY
    assert recall.recency(window) == {"piano": 1.0, "钢琴": older, "琴比": older, "比赛": older}


def test_a_bad_memory_is_refused_by_the_model() -> None:
    """An unknown kind never reaches a store."""
    with pytest.raises(ValueError, match="kind"):
        Memory(owner_id="ana", kind="wish", text="x", created_at=T0, source="cli")  # type: ignore[arg-type]


async def test_a_taken_memory_id_is_a_store_error(stores: Stores) -> None:
    """Adding a memory under an id already taken fails with a StoreError."""
    first = await stores.memories.add(note("a"))
    with pytest.raises(StoreError, match="could not store memory"):
        await stores.memories.add(note("b").model_copy(update={"id": first.id}))


async def test_a_memory_added_after_a_recall_is_recalled_next(stores: Stores) -> None:
    """Counts read by one recall move on with new rows: a new memory is found by the next."""
    await stores.history(filler(30))
    first = await stores.history(["钢琴比赛准备得怎样"], start=T0 + timedelta(days=1))
    assert await stores.memories.recall("ana", first, limit=5, max_chars=1200) == []
    await stores.memories.add(note(ZH_FACT, at=T0 + timedelta(days=1, hours=1)))
    again = await stores.history(["钢琴比赛那天穿什么"], start=T0 + timedelta(days=2))
    found = await stores.memories.recall("ana", again, limit=5, max_chars=1200)
    assert {(r.kind, r.text) for r in found} == {
        ("message", "钢琴比赛准备得怎样"),
        ("memory", ZH_FACT),
    }


async def test_a_neighbour_sharing_only_a_stock_phrase_stays_away(stores: Stores) -> None:
    """A recalled fact's neighbour that shares only a stock phrase with it is not recalled."""
    await stores.history([f"{t} lol" for t in filler(100)], start=T0 - timedelta(days=9))
    await stores.history(
        [
            "lol the Okavango canoe trip is booked for August",
            "lol the bus was late again",
            "I finished reading that novel about sailors",
        ],
        start=T0 - timedelta(days=8),
    )
    await stores.history(filler(100), start=T0 - timedelta(days=7))
    window = await stores.history(["下午有点困", "so excited, Okavango by canoe"], start=T0)
    found = [r.text for r in await stores.memories.recall("ana", window, limit=5, max_chars=1200)]
    assert found[0] == "lol the Okavango canoe trip is booked for August"
    assert "lol the bus was late again" not in found
