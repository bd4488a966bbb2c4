"""Persistence: SQLModel tables, the async engine, migrations, the stores and the outbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from backthink.config import DatabaseSettings
from backthink.store.database import Database
from backthink.store.engine import BUSY_TIMEOUT_MS, create_engine
from backthink.store.memories import SqlMemoryStore
from backthink.store.messages import SqlMessageStore
from backthink.store.migrator import migrate
from backthink.store.outbox import SqlOutbox
from backthink.store.owners import SqlOwnerStore
from backthink.store.rounds import SqlRoundStore
from backthink.store.session import SqlSession
from backthink.store.tokens import SqlTokenStore
from backthink.store.volatile import (
    MemoryMemoryStore,
    MemoryMessageStore,
    MemoryOutbox,
    MemoryOwnerStore,
    MemoryRoundStore,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "Database",
    "MemoryMemoryStore",
    "MemoryMessageStore",
    "MemoryOutbox",
    "MemoryOwnerStore",
    "MemoryRoundStore",
    "SqlMemoryStore",
    "SqlMessageStore",
    "SqlOutbox",
    "SqlOwnerStore",
    "SqlRoundStore",
    "SqlSession",
    "SqlStores",
    "SqlTokenStore",
    "create_engine",
    "migrate",
    "open_database",
    "open_store",
]


@dataclass(frozen=True)
class SqlStores:
    """The stores of one open database; they share its engine and connections."""

    db: Database
    messages: SqlMessageStore
    rounds: SqlRoundStore
    outbox: SqlOutbox
    memories: SqlMemoryStore
    owners: SqlOwnerStore
    session: SqlSession
    tokens: SqlTokenStore


async def open_store(
    url: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> tuple[Database, SqlMessageStore, SqlRoundStore]:
    """Create the engine for `url`, migrate it to the newest schema and build both stores.

    The caller owns the database and disposes of it (`await db.dispose()`) on shutdown;
    `SqlOutbox(db)` shares it. Commands use `open_database`, which closes it for them.

    Raises:
        StoreError: the database cannot be opened or migrated.
    """
    engine = create_engine(url, busy_timeout_ms=busy_timeout_ms)
    try:
        await migrate(engine)
    except BaseException:
        # Nobody else holds the engine yet, so its pooled connections are closed here.
        await engine.dispose()
        raise
    db = Database(engine, busy_timeout_ms=busy_timeout_ms)
    return db, SqlMessageStore(db), SqlRoundStore(db)


@asynccontextmanager
async def open_database(settings: DatabaseSettings) -> AsyncIterator[SqlStores]:
    """Open (and migrate) the configured database for the length of an `async with` block.

    Raises:
        StoreError: the database cannot be opened or migrated.
    """
    db, messages, rounds = await open_store(settings.url, busy_timeout_ms=settings.busy_timeout_ms)
    try:
        yield SqlStores(
            db,
            messages,
            rounds,
            SqlOutbox(db),
            SqlMemoryStore(db),
            SqlOwnerStore(db),
            SqlSession(db),
            SqlTokenStore(db),
        )
    finally:
        await db.dispose()
