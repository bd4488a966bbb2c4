"""Persistence: SQLModel tables, the async engine, migrations, the stores and the outbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.config import DatabaseSettings
from backthink.config.paths import sqlite_path
from backthink.errors import StoreError
from backthink.store.bundles import SqlStores, Stores, VolatileStores
from backthink.store.database import Database
from backthink.store.engine import BUSY_TIMEOUT_MS, create_engine
from backthink.store.marks import SqlMarks, VolatileMarks
from backthink.store.memories import SqlMemoryStore
from backthink.store.messages import SqlMessageStore
from backthink.store.migrator import HEAD_REVISION, migrate, schema_version, unwritable
from backthink.store.outbox import SqlOutbox
from backthink.store.owners import SqlOwnerStore
from backthink.store.rounds import SqlRoundStore
from backthink.store.session import SqlSession
from backthink.store.tokens import SqlTokenStore
from backthink.store.volatile import (
    VolatileMessageStore,
    VolatileOutbox,
    VolatileOwnerStore,
    VolatileRoundStore,
)
from backthink.store.volatile_memories import VolatileMemoryStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "Database",
    "SqlMarks",
    "SqlMemoryStore",
    "SqlMessageStore",
    "SqlOutbox",
    "SqlOwnerStore",
    "SqlRoundStore",
    "SqlSession",
    "SqlStores",
    "SqlTokenStore",
    "Stores",
    "VolatileMarks",
    "VolatileMemoryStore",
    "VolatileMessageStore",
    "VolatileOutbox",
    "VolatileOwnerStore",
    "VolatileRoundStore",
    "VolatileStores",
    "create_engine",
    "migrate",
    "open_database",
    "open_store",
]


async def open_store(
    url: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, write: bool = True
) -> tuple[Database, SqlMessageStore, SqlRoundStore]:
    """Create the engine for `url`, migrate it to the newest schema and build both stores.

    The caller owns the database and disposes of it (`await db.dispose()`) on shutdown;
    `SqlOutbox(db)` shares it. Commands use `open_database`, which closes it for them.
    A SQLite file this process cannot write is opened for reading when the
    caller only reads (`write=False`); a caller that writes is told so.

    Raises:
        StoreError: the database cannot be opened or migrated, or cannot be
            written and `write` is set.
    """
    engine = create_engine(url, busy_timeout_ms=busy_timeout_ms)
    try:
        await migrate(engine)
    except BaseException as exc:
        # Nobody else holds the engine yet, so its pooled connections are closed here.
        await engine.dispose()
        problem = unwritable(sqlite_path(make_url(url))) if isinstance(exc, StoreError) else None
        if problem is None:
            raise
        if write:
            raise StoreError(f"cannot write the database: {problem}") from None
        engine = await _open_read_only(url, busy_timeout_ms, problem)
    db = Database(engine, busy_timeout_ms=busy_timeout_ms)
    return db, SqlMessageStore(db), SqlRoundStore(db)


async def _open_read_only(url: str, busy_timeout_ms: int, problem: str) -> AsyncEngine:
    """The engine of a SQLite file read as it is; its schema must be current already.

    Raises:
        StoreError: the file cannot be read either, or it needs a migration.
    """
    engine = create_engine(url, busy_timeout_ms=busy_timeout_ms, read_only=True)
    try:
        current = await schema_version(engine)
    except BaseException:
        await engine.dispose()
        raise
    if current != HEAD_REVISION:
        await engine.dispose()
        raise StoreError(f"the database needs migrating, and {problem}")
    return engine


@asynccontextmanager
async def open_database(
    settings: DatabaseSettings, *, write: bool = True
) -> AsyncIterator[SqlStores]:
    """Open (and migrate) the configured database for the length of an `async with` block.

    A command that only reads passes `write=False`: it still works on a
    database in a folder it cannot write.

    Raises:
        StoreError: the database cannot be opened or migrated (or written, with `write`).
    """
    db, _, _ = await open_store(settings.url, busy_timeout_ms=settings.busy_timeout_ms, write=write)
    try:
        yield SqlStores.over(db)
    finally:
        await db.dispose()
