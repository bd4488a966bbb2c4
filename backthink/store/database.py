"""Database: the async engine plus the connections that run the stores' queries.

Every store call is a short synchronous SQLAlchemy Core function over one
connection. For a SQLite file:

- writes run on a dedicated worker thread with its own pysqlite connection,
  so a write that waits for another writer's lock (up to the busy timeout)
  never stalls the event loop;
- reads run inline on the event loop's thread over a second connection. In
  WAL mode a reader never waits for a writer, so an indexed read of a few
  dozen rows (a fraction of a millisecond) is cheaper done in place than
  handed to the worker and back, which costs two thread wake-ups
  (0.1-0.5 ms on a shared machine). A read that does meet a lock (WAL
  recovery after a crash, a database that could not switch to WAL) waits at
  most READ_BUSY_TIMEOUT_MS.

Other URLs run the same functions through the async engine's `run_sync`:
PostgreSQL over the engine's pool (a few connections per process, each read
and write on whichever is free, so rounds of many owners run side by side),
in-memory SQLite over its single connection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.config.paths import is_memory, sqlite_path
from backthink.errors import StoreError
from backthink.store.engine import tune_sqlite

T = TypeVar("T")

READ_BUSY_TIMEOUT_MS = 250
"""The longest an inline read waits for a lock, in milliseconds: it holds up the event loop."""


def _single_connection_engine(url: URL, busy_timeout_ms: int) -> Engine:
    # One connection per engine: the pool never needs a second one. The reader's
    # connection is opened and used on the loop's thread, the writer's on the
    # worker; neither is ever shared, so sqlite3's same-thread check is not needed.
    engine = create_sync_engine(
        url.set(drivername="sqlite"),
        pool_size=1,
        max_overflow=0,
        connect_args={"check_same_thread": False},
    )
    tune_sqlite(engine, busy_timeout_ms)
    return engine


class Database:
    """One database as the stores see it: `read` and `write` run sync Core functions."""

    def __init__(self, engine: AsyncEngine, *, busy_timeout_ms: int) -> None:
        """Wrap a migrated async engine; a SQLite file also gets its reader and writer."""
        self.engine = engine
        self._reader: Engine | None = None
        self._writer: Engine | None = None
        self._executor: ThreadPoolExecutor | None = None
        url = engine.url
        self._path = sqlite_path(url)
        self._identity = _identity(self._path) if self._path is not None else None
        if url.get_backend_name() == "sqlite" and not is_memory(url):
            self._reader = _single_connection_engine(
                url, min(busy_timeout_ms, READ_BUSY_TIMEOUT_MS)
            )
            self._writer = _single_connection_engine(url, busy_timeout_ms)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backthink-db")

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` on a connection, outside any explicit transaction.

        Keep `fn` to a few indexed queries: on a SQLite file it runs on the
        event loop's thread.
        """
        if self._reader is not None:
            with self._reader.connect() as conn:
                return fn(conn)
        async with self.engine.connect() as conn:
            return await conn.run_sync(fn)

    def check_file(self) -> None:
        """Fail when the SQLite file was deleted or replaced since it was opened.

        Open connections keep writing into a deleted file's inode, so without
        this a write would succeed into a file nobody can read again.

        Raises:
            StoreError: the file is gone or is another file now.
        """
        if self._path is None:
            return
        now = _identity(self._path)
        if now is None:
            raise StoreError(f"the database file {self._path} is gone (deleted while running)")
        if now != self._identity:
            raise StoreError(f"the database file {self._path} was replaced while running")

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one transaction: committed when it returns, rolled back when it raises.

        Raises:
            StoreError: the SQLite file was deleted or replaced since it was opened.
        """
        self.check_file()
        if self._writer is not None and self._executor is not None:
            writer = self._writer

            def run() -> T:
                with writer.begin() as conn:
                    return fn(conn)

            return await asyncio.get_running_loop().run_in_executor(self._executor, run)
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn)

    async def dispose(self) -> None:
        """Close every connection and stop the worker thread."""
        if self._reader is not None:
            self._reader.dispose()
            self._reader = None
        if self._writer is not None and self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.dispose)
            self._executor.shutdown(wait=True)
            self._writer = None
        await self.engine.dispose()


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, or None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino
