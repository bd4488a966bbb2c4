"""PostgreSQL specifics: URLs and drivers, the schema, one-line errors, forget, the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import Workdir
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from support.fake_openai import FakeOpenAI
from support.pgserver import PASSWORD_ROLE, PgServer
from test_store import T0, msg

from backthink.errors import StoreError
from backthink.models import Memory, MemoryKind
from backthink.store import SqlMemoryStore, create_engine, migrate, open_store
from backthink.store.fulltext import PG_FULLTEXT_INDEXES, is_fulltext
from backthink.store.migrator import HEAD_REVISION, alembic_config
from backthink.store.tables import metadata

SECRET = "hunter2-not-for-logs"
OPEN_GATE_ALL: dict[str, object] = {
    "quiet_hours": "",
    "quiet_mode": "critical_only",
    "activity_window": "0s",
    "min_interval": "0s",
    "daily_cap": 10,
    "max_unanswered": 10,
    "max_body_chars": 600,
    "duplicate_window": "0s",
    "default_channel": "web",
    "channel_cooldown": "0s",
}


def _upgrade_by_revisions(conn: Connection) -> None:
    from alembic import command

    command.upgrade(alembic_config(conn), "head")


def _fingerprint(conn: Connection) -> dict[str, Any]:
    """Columns, indexes (with their definitions), constraints and extensions of the schema."""
    found = inspect(conn)
    out: dict[str, Any] = {}
    for table in sorted(found.get_table_names()):
        out[table] = {
            "columns": sorted(
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in found.get_columns(table)
            ),
            "checks": sorted(str(c["name"]) for c in found.get_check_constraints(table)),
            "pk": found.get_pk_constraint(table)["name"],
        }
    out["indexes"] = conn.exec_driver_sql(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
    ).all()
    out["extensions"] = conn.exec_driver_sql("SELECT extname FROM pg_extension ORDER BY 1").all()
    return out


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "include_name": lambda name, type_, _parents: not is_fulltext(name, type_),
        },
    )
    return list(compare_metadata(context, metadata))


async def test_the_revisions_build_exactly_the_tables_and_a_new_database_the_same(
    pg_server: PgServer,
) -> None:
    """On PostgreSQL too the revisions match the metadata, and a new database matches both."""
    by_revisions = create_engine(pg_server.url(pg_server.create_database()))
    fresh = create_engine(pg_server.url(pg_server.create_database()))
    try:
        async with by_revisions.begin() as conn:
            await conn.run_sync(_upgrade_by_revisions)
        await migrate(fresh)
        await migrate(fresh)  # a current schema is left as it is
        async with by_revisions.connect() as a, fresh.connect() as b:
            assert await a.run_sync(_diff) == []
            expected, got = await a.run_sync(_fingerprint), await b.run_sync(_fingerprint)
            (version,) = (await b.exec_driver_sql("SELECT version_num FROM alembic_version")).one()
        assert got == expected and version == HEAD_REVISION
        trigram = {name: sql for name, sql in got["indexes"] if name in PG_FULLTEXT_INDEXES}
        assert set(trigram) == PG_FULLTEXT_INDEXES
        assert all("USING gin (text gin_trgm_ops)" in sql for sql in trigram.values())
        assert ("pg_trgm",) in got["extensions"]
    finally:
        await by_revisions.dispose()
        await fresh.dispose()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
async def test_a_plain_postgresql_url_means_psycopg(pg_url: str, scheme: str) -> None:
    """postgresql:// (and postgres://) open with psycopg, the one driver that is installed."""
    url = pg_url.replace("postgresql+psycopg", scheme, 1)
    db, messages, _ = await open_store(url)
    try:
        assert db.engine.url.drivername == "postgresql+psycopg"
        stored = await messages.add(msg("你好"))
        assert await messages.recent("ana", 5) == [stored]
    finally:
        await db.dispose()


def test_asyncpg_without_asyncpg_installed_is_one_line_naming_it() -> None:
    """A postgresql+asyncpg URL where asyncpg cannot be imported names the missing driver."""
    code = (
        "import sys; sys.modules['asyncpg'] = None\n"
        "from backthink.store import create_engine\n"
        "from backthink.errors import StoreError\n"
        "try:\n"
        f"    create_engine('postgresql+asyncpg://bob:{SECRET}@127.0.0.1:1/db')\n"
        "except StoreError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == (
        "database url needs the asyncpg driver, which is not installed (pip install asyncpg)"
    )
    assert SECRET not in out.stdout + out.stderr


def test_a_driver_without_asyncio_is_refused_by_name() -> None:
    """A sync-only PostgreSQL driver is a clear error, before anything is imported."""
    with pytest.raises(StoreError, match="'psycopg2' is not supported") as caught:
        create_engine(f"postgresql+psycopg2://bob:{SECRET}@127.0.0.1/db")
    assert SECRET not in str(caught.value)


async def _open_error(url: str) -> str:
    with pytest.raises(StoreError) as caught:
        await open_store(url)
    assert caught.value.__cause__ is None
    message = str(caught.value)
    assert "\n" not in message and SECRET not in message
    return message


async def test_server_failures_are_one_line_without_the_password(pg_server: PgServer) -> None:
    """A wrong password, a missing database, a refused connection: one line, no password."""
    pg_server.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD 'the-right-one'")
    try:
        base = f"127.0.0.1:{pg_server.port}"
        auth = await _open_error(f"postgresql://{PASSWORD_ROLE}:{SECRET}@{base}/postgres")
        assert auth.endswith(f'password authentication failed for user "{PASSWORD_ROLE}"')
        missing = await _open_error(f"postgresql://postgres:{SECRET}@{base}/nowhere")
        assert missing.endswith('database "nowhere" does not exist')
        refused = await _open_error(f"postgresql://postgres:{SECRET}@127.0.0.1:1/db")
        assert refused.endswith("Connection refused")
        assert auth.startswith("could not migrate the database: connection failed")
    finally:
        pg_server.execute(f"DROP ROLE {PASSWORD_ROLE}")


async def test_a_nul_character_is_a_clear_store_error(pg_url: str) -> None:
    """PostgreSQL text holds no NUL: such a message is refused in one line, the text unquoted."""
    db, messages, _ = await open_store(pg_url)
    try:
        with pytest.raises(StoreError) as caught:
            await messages.add(msg(f"{SECRET}\0"))
        assert str(caught.value) == (
            "could not store message: PostgreSQL text fields cannot contain NUL (0x00) bytes"
        )
    finally:
        await db.dispose()


def note(text: str) -> Memory:
    """A note of `ana` written from the command line."""
    return Memory(owner_id="ana", kind=MemoryKind.NOTE, text=text, created_at=T0, source="cli")


async def test_a_forgotten_memory_leaves_no_row_behind(pg_url: str) -> None:
    """After forget the memory's row is vacuumed away: no tuple of the table holds its text."""
    db, _, _ = await open_store(pg_url)
    store = SqlMemoryStore(db)
    secret = "瑞士银行保险箱密码"
    try:
        for i in range(30):
            await store.add(note(f"平常的记录{i}号，和别的都不一样"))
        gone = await store.add(note(secret))
        assert gone.id is not None and await store.search("ana", secret)
        assert await store.forget("ana", gone.id)
        assert await store.search("ana", secret) == []
        async with db.engine.begin() as conn:
            await conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pageinspect")
            tuples = (
                await conn.exec_driver_sql(
                    "SELECT t_data FROM heap_page_items(get_raw_page('memory', 0))"
                    " WHERE t_data IS NOT NULL"
                )
            ).all()
            dead = (
                await conn.exec_driver_sql(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'memory'"
                )
            ).scalar_one()
        assert len(tuples) == 30 and dead == 0
        assert all(secret.encode() not in bytes(t) for (t,) in tuples)
    finally:
        await db.dispose()


def test_a_sqlite_store_never_imports_the_postgresql_drivers(tmp_path: Path) -> None:
    """Opening and using a SQLite database loads neither psycopg nor procrastinate."""
    code = (
        "import asyncio, sys\n"
        "import backthink.host.daemon, backthink.cli.root\n"
        "from datetime import datetime, UTC\n"
        "from backthink.models import Message\n"
        "from backthink.store import SqlMemoryStore, open_store\n"
        "async def main():\n"
        f"    db, messages, _ = await open_store('sqlite+aiosqlite:///{tmp_path / 'bt.db'}')\n"
        "    m = await messages.add(Message(owner_id='a', role='user', text='钢琴比赛',\n"
        "                                   created_at=datetime(2026, 3, 1, tzinfo=UTC)))\n"
        "    await SqlMemoryStore(db).recall('a', [m], limit=5, max_chars=100)\n"
        "    await db.dispose()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith(('psycopg', 'procrastinate', 'backthink.store.pg_'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.slow
def test_the_command_line_works_against_postgresql(
    workdir: Workdir, fake: FakeOpenAI, pg_url: str
) -> None:
    """messages add, think --json and rounds --json run as processes on a PostgreSQL URL."""
    workdir.env["BACKTHINK_DATABASE__URL"] = pg_url.replace("postgresql+psycopg", "postgresql", 1)
    # Every gate value stated: the outcome depends on neither the hour nor a default.
    workdir.write_config(gate=OPEN_GATE_ALL)
    workdir.cli(
        "messages", "add", "--role", "user", "--text", "明天组会好紧张",
        "--at", "2026-11-29T22:00:00+08:00",
    )  # fmt: skip
    fake.script("她在紧张。\n[我决定:push]\n[紧急:routine]\n组会加油。")
    result = workdir.think_json()
    assert (result["outcome"], result["reason"], result["channel"]) == ("delivered", "web", "web")
    (request,) = fake.chat_requests
    assert "明天组会好紧张" in json.dumps(request.body, ensure_ascii=False)
    (listed,) = json.loads(workdir.cli("rounds", "--json").stdout)
    assert (listed["round_id"], listed["outcome"]) == (result["round_id"], "delivered")
    assert not (workdir.path / "bt.db").exists()

    async def session() -> list[tuple[str, str, str]]:
        db, messages, _ = await open_store(pg_url)
        try:
            return [(m.role, m.origin, m.text) for m in await messages.recent("o", 5)]
        finally:
            await db.dispose()

    assert asyncio.run(session()) == [
        ("user", "chat", "明天组会好紧张"),
        ("assistant", "proactive", "组会加油。"),
    ]
