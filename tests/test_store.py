"""The message and round stores: one contract over SQL and memory, plus SQLite specifics."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, Table
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable

from backthink.errors import StoreError
from backthink.models import MemoryRef, Message, Outcome, PastPush, Urgency
from backthink.records import RoundRecord, ToolUse
from backthink.store import (
    BUSY_TIMEOUT_MS,
    Database,
    SqlMessageStore,
    SqlRoundStore,
    VolatileMessageStore,
    VolatileRoundStore,
    create_engine,
    migrate,
    open_store,
)
from backthink.store.fulltext import FULLTEXT_DDL, is_fulltext_table
from backthink.store.messages import _newest, _newest_owner_channels
from backthink.store.migrator import alembic_config
from backthink.store.tables import metadata
from backthink.testing import proactive_messages

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PLUS_8 = timezone(timedelta(hours=8))
PRIVATE = "the private line nobody may log"

AnyMessageStore = SqlMessageStore | VolatileMessageStore
AnyRoundStore = SqlRoundStore | VolatileRoundStore


def msg(text: str, *, at: datetime = T0, owner: str = "ana", **fields: Any) -> Message:
    """Build a user message of `owner` at `at`."""
    role = fields.pop("role", "user")
    return Message(owner_id=owner, role=role, text=text, created_at=at, **fields)


def record(round_id: str, *, at: datetime = T0, owner: str = "ana", **fields: Any) -> RoundRecord:
    """Build a finished round that started at `at`."""
    values: dict[str, Any] = {
        "id": round_id,
        "owner_id": owner,
        "trigger": "heartbeat",
        "started_at": at,
        "finished_at": at + timedelta(seconds=3),
        "outcome": Outcome.SKIPPED,
        "reason": "no_push",
    }
    values.update(fields)
    return RoundRecord(**values)


def texts(messages: list[Message]) -> list[str]:
    """The texts of some messages, in order."""
    return [message.text for message in messages]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A database file in a folder that does not exist yet."""
    return tmp_path / "data" / "backthink.db"


@pytest.fixture
async def engine(db_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite engine on a temporary file, disposed afterwards."""
    engine = create_engine(f"sqlite+aiosqlite:///{db_path}")
    await migrate(engine)
    yield engine
    await engine.dispose()


def store_url(request: pytest.FixtureRequest, kind: str, db_path: Path) -> str:
    """The database URL of a SQL kind: a SQLite file, or a new PostgreSQL database."""
    if kind == "pg":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite+aiosqlite:///{db_path}"


@pytest.fixture(params=["sql", "memory", "pg"])
async def messages(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[AnyMessageStore]:
    """Each MessageStore implementation, empty: SQLite, in memory, PostgreSQL."""
    if request.param == "memory":
        yield VolatileMessageStore()
        return
    engine, store, _ = await open_store(store_url(request, request.param, db_path))
    yield store
    await engine.dispose()


@pytest.fixture(params=["sql", "memory", "pg"])
async def rounds(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[AnyRoundStore]:
    """Each RoundStore implementation, empty: SQLite, in memory, PostgreSQL."""
    if request.param == "memory":
        yield VolatileRoundStore()
        return
    engine, _, store = await open_store(store_url(request, request.param, db_path))
    yield store
    await engine.dispose()


# The MessageStore contract.


async def test_add_returns_the_message_with_a_new_id(messages: AnyMessageStore) -> None:
    """add gives each message a fresh, increasing id and keeps every other field."""
    first = await messages.add(msg("one", speaker="p", channel="tg", image="data:x"))
    second = await messages.add(msg("two"))
    assert first.id is not None and second.id is not None and second.id > first.id
    assert first.model_dump(exclude={"id"}) == msg(
        "one", speaker="p", channel="tg", image="data:x"
    ).model_dump(exclude={"id"})
    assert await messages.recent("ana", 5) == [first, second]


async def test_recent_is_the_newest_n_oldest_first(messages: AnyMessageStore) -> None:
    """recent returns the last `limit` messages in chronological order."""
    await messages.add_many([msg(f"m{i}", at=T0 + timedelta(minutes=i)) for i in (3, 0, 4, 1, 2)])
    assert texts(await messages.recent("ana", 3)) == ["m2", "m3", "m4"]


async def test_equal_timestamps_keep_insertion_order(messages: AnyMessageStore) -> None:
    """Messages stored with the same time come back in the order they were stored."""
    for text in ["a", "b", "c", "d"]:
        await messages.add(msg(text))
    assert texts(await messages.recent("ana", 10)) == ["a", "b", "c", "d"]
    assert texts(await messages.recent("ana", 2)) == ["c", "d"]


async def test_limit_zero_and_limit_beyond_history(messages: AnyMessageStore) -> None:
    """A limit of 0 reads nothing; a limit beyond the history reads all of it."""
    await messages.add_many([msg("a"), msg("b")])
    assert await messages.recent("ana", 0) == []
    assert texts(await messages.recent("ana", 50)) == ["a", "b"]


async def test_negative_limits_are_refused(messages: AnyMessageStore) -> None:
    """A negative limit is a programming error, not "everything"."""
    with pytest.raises(ValueError, match="limit"):
        await messages.recent("ana", -1)
    with pytest.raises(ValueError, match="limit"):
        await messages.owner_activity("ana", messages=-1, pushes=1)


async def test_sessions_and_owners_are_isolated(messages: AnyMessageStore) -> None:
    """recent reads one owner's one session only."""
    await messages.add_many(
        [msg("ana main"), msg("ana side", session_id="side"), msg("bo main", owner="bo")]
    )
    assert texts(await messages.recent("ana", 10)) == ["ana main"]
    assert texts(await messages.recent("ana", 10, session_id="side")) == ["ana side"]
    assert texts(await messages.recent("bo", 10)) == ["bo main"]
    assert await messages.recent("nobody", 10) == []


async def test_times_come_back_aware_utc_and_order_by_instant(messages: AnyMessageStore) -> None:
    """A +08:00 time is stored as its UTC instant, and ordering follows instants, not wall text."""
    early = datetime(2026, 3, 1, 10, 0, tzinfo=PLUS_8)  # 02:00 UTC
    late = datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    added = await messages.add(msg("early", at=early))
    await messages.add_many([msg("late", at=late)])
    assert added.created_at.tzinfo is UTC
    stored = await messages.recent("ana", 10)
    assert texts(stored) == ["early", "late"]
    assert [m.created_at for m in stored] == [early, late]
    assert all(m.created_at.tzinfo is UTC for m in stored)
    assert stored[0].created_at.hour == 2


async def test_add_many_counts_and_accepts_an_empty_batch(messages: AnyMessageStore) -> None:
    """add_many returns how many it stored, and an empty batch stores nothing."""
    assert await messages.add_many([]) == 0
    assert await messages.add_many([msg("a"), msg("b"), msg("c")]) == 3
    assert texts(await messages.recent("ana", 10)) == ["a", "b", "c"]


def _bad_batch(kind: str, taken_id: int) -> list[Message]:
    good = [msg(PRIVATE), msg("second")]
    if kind == "taken id":
        return [*good, msg("clash", id=taken_id)]
    # model_construct skips validation, the way a careless caller could; the
    # database's NOT NULL constraint (or the memory store's check) must catch it.
    broken = Message.model_construct(owner_id="ana", role="user", text=None, created_at=T0)
    return [*good, broken]


@pytest.mark.parametrize("kind", ["taken id", "missing text"])
async def test_add_many_is_all_or_nothing(messages: AnyMessageStore, kind: str) -> None:
    """A batch that fails on its last message leaves nothing of the batch stored."""
    existing = await messages.add(msg("before"))
    assert existing.id is not None
    with pytest.raises(StoreError, match="could not store messages") as caught:
        await messages.add_many(_bad_batch(kind, existing.id))
    assert PRIVATE not in str(caught.value)
    assert texts(await messages.recent("ana", 10)) == ["before"]


async def test_add_with_a_taken_id_fails(messages: AnyMessageStore) -> None:
    """Storing a message under an id that is already used is a StoreError."""
    stored = await messages.add(msg("a"))
    with pytest.raises(StoreError):
        await messages.add(msg("b", id=stored.id))
    assert texts(await messages.recent("ana", 10)) == ["a"]


async def test_session_view_reads_recent_and_the_owners_last_word(
    messages: AnyMessageStore,
) -> None:
    """session_view returns the history oldest first and when the owner last wrote."""
    empty = await messages.session_view("ana", 3)
    assert (empty.recent, empty.last_owner_message_at) == ([], None)
    await messages.add_many(
        [
            msg("u1", at=T0),
            msg("a1", at=T0 + timedelta(minutes=1), role="assistant"),
            msg("u2", at=T0 + timedelta(minutes=2)),
            msg("a2", at=T0 + timedelta(minutes=3), role="assistant"),
            msg("a3", at=T0 + timedelta(minutes=4), role="assistant"),
            msg("side", at=T0 + timedelta(minutes=5), session_id="side"),
        ]
    )
    view = await messages.session_view("ana", 3)
    assert texts(view.recent) == ["u2", "a2", "a3"]
    assert view.recent == await messages.recent("ana", 3)
    assert view.last_owner_message_at == T0 + timedelta(minutes=2)
    # The owner's last word lies outside the two newest messages: still found.
    further = await messages.session_view("ana", 2)
    assert texts(further.recent) == ["a2", "a3"]
    assert further.last_owner_message_at == T0 + timedelta(minutes=2)
    nothing = await messages.session_view("ana", 0)
    assert (nothing.recent, nothing.last_owner_message_at) == ([], T0 + timedelta(minutes=2))
    assert (await messages.session_view("bo", 3)).last_owner_message_at is None
    with pytest.raises(ValueError, match="limit"):
        await messages.session_view("ana", -1)


async def test_owner_activity_reads_owner_channels_and_pushes(messages: AnyMessageStore) -> None:
    """owner_activity returns the owner's channels and the pushes, both newest first."""
    await messages.add_many(
        [
            msg("u1", at=T0, channel="tg"),
            msg("p1", at=T0 + timedelta(minutes=1), role="assistant", origin="proactive"),
            msg("a1", at=T0 + timedelta(minutes=2), role="assistant", channel="mail"),
            msg("u2", at=T0 + timedelta(minutes=3)),
            msg("p2", at=T0 + timedelta(minutes=4), role="assistant", origin="proactive"),
        ]
    )
    activity = await messages.owner_activity("ana", messages=5, pushes=5)
    assert activity.owner_messages == [(None, T0 + timedelta(minutes=3)), ("tg", T0)]
    assert activity.pushes == [
        PastPush(T0 + timedelta(minutes=4), "p2", None),
        PastPush(T0 + timedelta(minutes=1), "p1", None),
    ]
    short = await messages.owner_activity("ana", messages=1, pushes=1)
    assert (len(short.owner_messages), [p.body for p in short.pushes]) == (1, ["p2"])
    assert await messages.owner_activity("bo", messages=5, pushes=5) == type(activity)([], [])
    with pytest.raises(ValueError, match="limit"):
        await messages.owner_activity("ana", messages=-1, pushes=5)


@pytest.mark.parametrize("kind", ["sql", "memory", "pg"])
async def test_the_outbox_commits_delivery_and_write_back_together(
    kind: str, db_path: Path, request: pytest.FixtureRequest
) -> None:
    """commit stores a delivery with its write-back or neither; unrecorded finds unrecorded rows."""
    from backthink.records import Delivery, DeliveryStatus, OutgoingMessage
    from backthink.store import SqlOutbox, VolatileOutbox

    if kind != "memory":
        db, messages, rounds = await open_store(store_url(request, kind, db_path))
        outbox: SqlOutbox | VolatileOutbox = SqlOutbox(db)
    else:
        messages, rounds = VolatileMessageStore(), VolatileRoundStore()
        outbox = VolatileOutbox(messages, rounds)

    def delivery(round_id: str, at: datetime = T0) -> Delivery:
        message = OutgoingMessage(
            round_id=round_id, owner_id="ana", persona_id="p", text="hi", created_at=at
        )
        return Delivery(
            id=round_id,
            owner_id="ana",
            channel="web",
            message=message,
            status=DeliveryStatus.SENT,
            attempts=1,
            created_at=at,
            updated_at=at,
            trigger="cron",
        )

    writeback = msg("hi", role="assistant", origin="proactive", channel="web")
    assert await outbox.commit(delivery("r1"), writeback)
    assert await outbox.get("r1") == delivery("r1")
    assert texts(await proactive_messages(messages, "ana", 5)) == ["hi"]
    assert not await outbox.commit(delivery("r1"), writeback)
    # A write-back the database refuses leaves no delivery behind.
    broken = Message.model_construct(**{**dict(writeback), "text": None})
    with pytest.raises(StoreError):
        await outbox.commit(delivery("r2"), broken)
    assert await outbox.get("r2") is None
    # Rows whose round has no record, from `since` on, oldest first.
    assert await outbox.commit(delivery("r0", at=T0 - timedelta(days=3)), writeback)
    assert [d.id for d in await outbox.unrecorded(since=T0 - timedelta(days=1))] == ["r1"]
    await rounds.save(record("r1"))
    assert await outbox.unrecorded(since=T0 - timedelta(days=1)) == []
    assert [d.id for d in await outbox.unrecorded(since=T0 - timedelta(days=4))] == ["r0"]
    if kind != "memory":
        await db.dispose()


# The RoundStore contract.


async def test_a_round_round_trips_every_field(rounds: AnyRoundStore) -> None:
    """A saved round reads back equal, with its times converted to aware UTC."""
    start = datetime(2026, 3, 1, 20, 0, tzinfo=PLUS_8)
    full = record(
        "r1",
        at=start,
        outcome=Outcome.DELIVERED,
        reason="delivered",
        push=True,
        urgency=Urgency.WARNING,
        decided_channel="tg",
        body="记得喝水",
        channel="tg",
        model="m",
        prompt_tokens=120,
        completion_tokens=30,
        latency_ms=812.5,
        raw_reply="raw ⟨footer⟩",
        notes=["quiet hours ignored", "状态未知"],
        tools=[ToolUse(name="memory_search", ok=True, ms=1.5, args_chars=12)],
        recalled=[MemoryRef(kind="thought", id=3), MemoryRef(kind="message", id=41)],
        digest="9f" * 32,
    )
    await rounds.save(full)
    loaded = await rounds.get("r1")
    assert loaded == full
    assert loaded is not None and loaded.started_at.tzinfo is UTC
    assert loaded.finished_at.tzinfo is UTC and loaded.started_at.hour == 12
    assert await rounds.list() == [full]


async def test_a_missing_round_is_none(rounds: AnyRoundStore) -> None:
    """get of an unknown id returns None."""
    assert await rounds.get("nope") is None


async def test_saving_a_round_id_twice_fails(rounds: AnyRoundStore) -> None:
    """The second save of one round id is a StoreError and keeps the first record."""
    await rounds.save(record("r1"))
    with pytest.raises(StoreError, match="r1"):
        await rounds.save(record("r1", reason="other"))
    stored = await rounds.get("r1")
    assert stored is not None and stored.reason == "no_push"


async def test_rounds_list_newest_first_per_owner_and_limited(rounds: AnyRoundStore) -> None:
    """list orders by start time, newest first, filters by owner and honours the limit."""
    for i, owner in enumerate(["ana", "bo", "ana", "ana", "bo"]):
        await rounds.save(record(f"r{i}", at=T0 + timedelta(minutes=i), owner=owner))
    assert [r.id for r in await rounds.list()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in await rounds.list(owner_id="ana")] == ["r3", "r2", "r0"]
    assert [r.id for r in await rounds.list(owner_id="ana", limit=2)] == ["r3", "r2"]
    assert await rounds.list(owner_id="nobody") == []


async def test_last_asked_is_the_newest_round_with_a_digest_since(rounds: AnyRoundStore) -> None:
    """last_asked skips rounds that called no model, other owners, and rounds before `since`."""
    await rounds.save(record("r0", at=T0, digest="a"))
    await rounds.save(record("r1", at=T0 + timedelta(minutes=30), digest="b"))
    await rounds.save(record("r2", at=T0 + timedelta(minutes=60)))  # skipped: no model call
    await rounds.save(record("r3", at=T0 + timedelta(minutes=90), owner="bo", digest="c"))
    found = await rounds.last_asked("ana", T0)
    assert found is not None and (found.id, found.digest) == ("r1", "b")
    assert await rounds.last_asked("ana", T0 + timedelta(minutes=31)) is None
    assert await rounds.last_asked("nobody", T0) is None


# SQLite specifics.


async def _scalar(engine: AsyncEngine, sql: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.exec_driver_sql(sql)).scalar_one()


async def test_every_connection_is_tuned(engine: AsyncEngine, db_path: Path) -> None:
    """WAL mode, the busy timeout, foreign keys and synchronous=NORMAL are on."""
    assert db_path.parent.is_dir()
    assert await _scalar(engine, "PRAGMA journal_mode") == "wal"
    assert await _scalar(engine, "PRAGMA busy_timeout") == BUSY_TIMEOUT_MS
    assert await _scalar(engine, "PRAGMA foreign_keys") == 1
    assert await _scalar(engine, "PRAGMA synchronous") == 1  # NORMAL


@pytest.mark.parametrize(
    "url", ["sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:", "sqlite://"]
)
async def test_in_memory_databases_work(url: str) -> None:
    """An in-memory URL (also without a driver) keeps one database across calls."""
    engine, store, _ = await open_store(url)
    try:
        await store.add(msg("a"))
        await store.add(msg("b"))
        assert texts(await store.recent("ana", 5)) == ["a", "b"]
    finally:
        await engine.dispose()


async def _plan(engine: AsyncEngine, query: Executable) -> list[str]:
    sql = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")).all()
    return [str(row[-1]) for row in rows]


async def test_reading_the_newest_messages_walks_the_index(engine: AsyncEngine) -> None:
    """The newest-message queries search their index (by session or by role): no scan, no sort."""
    store = SqlMessageStore(Database(engine, busy_timeout_ms=BUSY_TIMEOUT_MS))
    await store.add_many(
        [
            msg(f"m{i}", owner=f"o{i % 3}", at=T0 + timedelta(seconds=i), channel="tg")
            for i in range(600)
        ]
    )
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ANALYZE")
    by_session = "INDEX ix_message_recent (owner_id=? AND session_id=?)"
    by_role = "INDEX ix_message_role (owner_id=? AND session_id=? AND role=?)"
    params = {"owner_id": "o1", "session_id": "main"}
    queries = {
        "recent": (_newest().params(limit=20, **params), by_session),
        "the owner's channels": (_newest_owner_channels().params(limit=50, **params), by_role),
    }
    for name, (query, index) in queries.items():
        plan = await _plan(engine, query)
        assert any(step.startswith("SEARCH message USING") and index in step for step in plan), (
            name,
            plan,
        )
        assert not any("TEMP B-TREE" in step or step.startswith("SCAN") for step in plan), (
            name,
            plan,
        )


async def test_reading_the_newest_pushes_walks_the_origin_index(engine: AsyncEngine) -> None:
    """The gate's push read searches ix_message_origin, however many chats lie between."""
    from backthink.store.messages import _newest_pushes

    store = SqlMessageStore(Database(engine, busy_timeout_ms=BUSY_TIMEOUT_MS))
    await store.add_many(
        [
            msg(f"m{i}", at=T0 + timedelta(seconds=i), origin="proactive" if i % 50 else "chat")
            for i in range(600)
        ]
    )
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ANALYZE")
    plan = await _plan(engine, _newest_pushes().params(owner_id="ana", session_id="main", limit=9))
    assert any(
        "INDEX ix_message_origin (owner_id=? AND session_id=? AND origin=?)" in step
        for step in plan
    ), plan
    assert not any("TEMP B-TREE" in step or step.startswith("SCAN") for step in plan), plan


def _schema(conn: Connection) -> list[tuple[str, str]]:
    rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master ORDER BY name").all()
    return [(str(name), str(sql)) for name, sql in rows]


def _revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


async def test_migrating_twice_changes_nothing(engine: AsyncEngine) -> None:
    """A second migrate on a current database keeps the schema and the revision."""
    async with engine.connect() as conn:
        schema_before = await conn.run_sync(_schema)
    await migrate(engine)
    async with engine.connect() as conn:
        assert await conn.run_sync(_schema) == schema_before
        revision = await conn.run_sync(_revision)
    assert revision == ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade_by_revisions(conn: Connection) -> None:
    """Build the schema the long way: every alembic revision in turn."""
    from alembic import command

    command.upgrade(alembic_config(conn), "head")


def _fingerprint(conn: Connection) -> dict[str, Any]:
    """Columns, indexes and named constraints of every table, independent of column order."""
    out: dict[str, Any] = {}
    tables = conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
    ).all()
    for name, sql in tables:
        columns = conn.exec_driver_sql(f"PRAGMA table_info('{name}')").all()
        indexes = {
            str(index[1]): [
                str(col[2]) for col in conn.exec_driver_sql(f"PRAGMA index_info('{index[1]}')")
            ]
            for index in conn.exec_driver_sql(f"PRAGMA index_list('{name}')").all()
        }
        out[str(name)] = {
            "columns": sorted((str(c[1]), str(c[2]), c[3], c[4], c[5]) for c in columns),
            "indexes": indexes,
            "constraints": sorted(re.findall(r"CONSTRAINT (\w+)", str(sql))),
        }
    # Virtual tables and triggers are created by hand on both paths: their SQL must match.
    out["by hand"] = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master"
        " WHERE type = 'trigger' OR sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
    ).all()
    return out


async def test_a_new_database_gets_the_schema_the_revisions_build(
    db_path: Path, tmp_path: Path
) -> None:
    """A new database is created from the metadata: the same schema, stamped at head."""
    by_revisions = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'revisions.db'}")
    fresh = create_engine(f"sqlite+aiosqlite:///{db_path}")
    try:
        async with by_revisions.begin() as conn:
            await conn.run_sync(_upgrade_by_revisions)
        await migrate(fresh)
        async with by_revisions.connect() as a, fresh.connect() as b:
            expected, got = await a.run_sync(_fingerprint), await b.run_sync(_fingerprint)
            assert await b.run_sync(_revision) == await a.run_sync(_revision)
        fulltext = {
            f"{table}_fts{suffix}"
            for table in ("memory", "message")
            for suffix in ("", "_config", "_data", "_docsize", "_idx", "_vocab")
        } | {
            f"{table}_words{suffix}"
            for table in ("memory", "message")
            for suffix in ("", "_config", "_data", "_docsize", "_idx")
        }
        plain = {"alembic_version", "api_token", "delivery", "mark", "memory", "message"}
        plain |= {"owner", "round"}
        assert set(got) == plain | fulltext | {"by hand"}
        assert got == expected
        # The revision's own copy of the statements is the one the package runs.
        assert sorted(sql for _, _, sql in got["by hand"]) == sorted(FULLTEXT_DDL)
        assert "ck_message_origin" in got["message"]["constraints"]
    finally:
        await by_revisions.dispose()
        await fresh.dispose()


def test_a_new_or_current_database_opens_without_alembic(db_path: Path) -> None:
    """Neither creating a database nor reopening a current one imports alembic (start-up time)."""
    import subprocess
    import sys

    script = (
        "import asyncio, sys\n"
        "from backthink.store import open_store\n"
        "async def main():\n"
        f"    db, _, _ = await open_store('sqlite+aiosqlite:///{db_path}')\n"
        "    await db.dispose()\n"
        "asyncio.run(main())\n"
        "print('alembic' in sys.modules)\n"
    )
    for _ in ("new", "current"):
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False", out.stderr
    assert db_path.exists()


def _not_fulltext(name: str | None, type_: str, parent_names: Any) -> bool:
    return not (type_ == "table" and name is not None and is_fulltext_table(name))


async def test_migrations_build_exactly_the_tables(tmp_path: Path) -> None:
    """The schema the revisions build has no differences from the SQLModel metadata."""

    def diff(conn: Connection, target: MetaData) -> list[Any]:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": _not_fulltext}
        )
        return list(compare_metadata(context, target))

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'revisions.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade_by_revisions)
    async with engine.connect() as conn:
        assert await conn.run_sync(diff, metadata) == []
        # The comparison itself must be able to see a difference.
        wider = MetaData()
        for table in metadata.tables.values():
            table.to_metadata(wider)
        Table("extra", wider, Column("id", Integer, primary_key=True))
        assert [change[0] for change in await conn.run_sync(diff, wider)] == ["add_table"]
    await engine.dispose()


@pytest.mark.timeout(20)
async def test_a_locked_database_is_a_clear_store_error(db_path: Path) -> None:
    """A writer held off by another's exclusive lock fails after the busy timeout, text unleaked."""
    busy_timeout_ms = 200
    engine, store, _ = await open_store(f"sqlite:///{db_path}", busy_timeout_ms=busy_timeout_ms)
    await store.add(msg("before"))
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises(StoreError, match="database is locked") as caught:
            await store.add(msg(PRIVATE))
        waited = time.monotonic() - started
        # WAL lets readers go on while another connection writes.
        assert texts(await store.recent("ana", 5)) == ["before"]
    finally:
        holder.rollback()
        holder.close()
        await engine.dispose()
    message = str(caught.value)
    assert message == "could not store message: database is locked"
    assert PRIVATE not in message and caught.value.__cause__ is None
    # It waited for the configured timeout, not the 5 s default.
    assert busy_timeout_ms / 1000 * 0.9 <= waited < BUSY_TIMEOUT_MS / 1000


async def test_an_unopenable_database_is_a_clear_store_error(tmp_path: Path) -> None:
    """A database path that is a folder gives one line naming SQLite's complaint."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}")
    threads_before = set(threading.enumerate())
    try:
        with pytest.raises(StoreError) as caught:
            await migrate(engine)
    finally:
        await engine.dispose()
        # After a failed connect aiosqlite stops its worker thread without
        # waiting for it; the thread then reports to the event loop, which must
        # still be open, so the test waits for it here.
        for thread in set(threading.enumerate()) - threads_before:
            thread.join(timeout=5)
    assert str(caught.value) == "could not migrate the database: unable to open database file"


async def test_a_malformed_url_is_a_store_error() -> None:
    """A URL SQLAlchemy cannot parse is a StoreError that does not repeat the URL."""
    with pytest.raises(StoreError, match="not a valid") as caught:
        create_engine("::secret-password::")
    assert "secret" not in str(caught.value)


async def test_open_store_migrates_and_builds_both_stores(db_path: Path) -> None:
    """open_store gives a migrated engine and working message and round stores."""
    engine, messages, rounds = await open_store(f"sqlite+aiosqlite:///{db_path}")
    try:
        await messages.add(msg("hello"))
        await rounds.save(record("r1"))
        assert texts(await messages.recent("ana", 1)) == ["hello"]
        assert [r.id for r in await rounds.list(owner_id="ana")] == ["r1"]
    finally:
        await engine.dispose()


async def test_upgrading_from_the_first_schema_keeps_every_row(db_path: Path) -> None:
    """A database created at revision 0001 keeps its messages and outbox rows through upgrades."""
    from alembic import command

    url = f"sqlite+aiosqlite:///{db_path}"
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0001"))
        with sqlite3.connect(db_path) as raw:
            raw.execute(
                "INSERT INTO message (owner_id, session_id, role, text, origin, created_at)"
                " VALUES ('ana', 'main', 'user', 'kept', 'chat', '2026-11-30 00:00:00.000000')"
            )
            raw.execute(
                "INSERT INTO delivery (id, channel, payload, status, attempts, created_at,"
                " updated_at) VALUES ('r1', 'web', '{}', 'sent', 1, '2026-11-30 00:00:00.000000',"
                " '2026-11-30 00:00:00.000000')"
            )
        await migrate(engine)
        db = Database(engine, busy_timeout_ms=BUSY_TIMEOUT_MS)
        (kept,) = await SqlMessageStore(db).recent("ana", 5)
        await db.dispose()
        assert kept.text == "kept" and kept.created_at == datetime(2026, 11, 30, tzinfo=UTC)
        with sqlite3.connect(db_path) as raw:
            row = raw.execute("SELECT id, owner_id, trigger FROM delivery").fetchone()
            version = raw.execute("SELECT version_num FROM alembic_version").fetchone()
        assert row == ("r1", "default", None)
        assert version == (ScriptDirectory.from_config(alembic_config()).get_current_head(),)
    finally:
        await engine.dispose()


def test_head_revision_constant_matches_the_scripts() -> None:
    """The revision the fast start-up check compares with is the newest script."""
    from backthink.store.migrator import HEAD_REVISION

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION
