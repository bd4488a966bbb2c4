"""Database: the async engine plus one worker thread that runs the stores' queries.

Every store call is a short synchronous SQLAlchemy Core function over one
connection. For a SQLite file it runs on a dedicated worker thread with its
own pysqlite connection: one thread hop per call instead of one per driver
operation, which is what keeps a round's database work at a few milliseconds
whatever the history size. Other URLs (PostgreSQL, in-memory SQLite, whose
single connection lives in the async engine) run the same function through
the async engine's `run_sync`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.store.engine import is_memory, tune_sqlite

T = TypeVar("T")


class Database:
    """One database as the stores see it: `read` and `write` run sync Core functions."""

    def __init__(self, engine: AsyncEngine, *, busy_timeout_ms: int) -> None:
        """Wrap a migrated async engine; a SQLite file also gets its worker thread."""
        self.engine = engine
        self._sync: Engine | None = None
        self._executor: ThreadPoolExecutor | None = None
        url = engine.url
        if url.get_backend_name() == "sqlite" and not is_memory(url):
            # One thread, one connection: the pool never needs a second one.
            self._sync = create_sync_engine(
                url.set(drivername="sqlite"), pool_size=1, max_overflow=0
            )
            tune_sqlite(self._sync, busy_timeout_ms)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backthink-db")

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` on a connection, outside any explicit transaction."""
        return await self._run(fn, transaction=False)

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one transaction: committed when it returns, rolled back when it raises."""
        return await self._run(fn, transaction=True)

    async def _run(self, fn: Callable[[Connection], T], *, transaction: bool) -> T:
        if self._sync is not None and self._executor is not None:
            sync = self._sync

            def run() -> T:
                with sync.begin() if transaction else sync.connect() as conn:
                    return fn(conn)

            return await asyncio.get_running_loop().run_in_executor(self._executor, run)
        async with self.engine.begin() if transaction else self.engine.connect() as conn:
            return await conn.run_sync(fn)

    async def dispose(self) -> None:
        """Close every connection and stop the worker thread."""
        if self._sync is not None and self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._sync.dispose)
            self._executor.shutdown(wait=True)
            self._sync = None
        await self.engine.dispose()
