"""The owners' round locks on PostgreSQL: a session advisory lock per owner, on one connection.

Every process on the database (the daemon, each worker, a `think`) holds the
locks of the rounds it runs on one connection of its own, kept for the
process's life: taking one is one `pg_try_advisory_lock`, giving it back one
`pg_advisory_unlock`, each a single round trip. That connection is psycopg's
own (psycopg is a dependency whatever driver the stores use), outside the
stores' pool: it never takes a connection a round's queries need, and a
statement costs a third of what it would through SQLAlchemy. A process that dies closes
its connection and the server lets go of every lock it held, so a killed
worker never leaves an owner locked; a frozen one keeps its owners until it
thaws or its connection is cut. A connection that breaks is opened again and
the locks of the rounds still running are taken again on it; one another
process took in between is logged and left to it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import TYPE_CHECKING, LiteralString

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.errors import StoreError
from backthink.store.failures import describe, store_errors

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = structlog.get_logger(__name__)

_PERSON = b"bt-round"  # the hash's personalisation: these keys are owners' round locks
_TAKE: LiteralString = "SELECT pg_try_advisory_lock(%s)"
_GIVE_BACK: LiteralString = "SELECT pg_advisory_unlock(%s)"
# A bigint key shows in pg_locks as its high half in classid, its low half in objid.
_HELD = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND objsubid = 1 AND classid = CAST(:high AS oid) AND objid = CAST(:low AS oid))"
)
_HALF = 0xFFFFFFFF
CONNECT_TIMEOUT_S = 10  # seconds to open the lock connection before the round fails


def lock_key(owner_id: str) -> int:
    """The owner's 64-bit advisory lock key (two owners share one with odds of 2^-64)."""
    digest = hashlib.blake2b(owner_id.encode(), digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "big", signed=True)


def is_postgres(engine: AsyncEngine) -> bool:
    """Whether the engine's database is PostgreSQL (the only one with these locks)."""
    return engine.dialect.name == "postgresql"


async def round_running(engine: AsyncEngine, owner_id: str) -> bool:
    """Whether any process on the database holds the owner's round lock now (False off PostgreSQL).

    Raises:
        StoreError: the database cannot be read.
    """
    if not is_postgres(engine):
        return False
    key = lock_key(owner_id)
    halves = {"high": (key >> 32) & _HALF, "low": key & _HALF}
    with store_errors("could not read the round locks"):
        async with engine.connect() as conn:
            return bool((await conn.execute(_HELD, halves)).scalar())


class RoundLocks:
    """The round locks this process holds, on its one lock connection."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Take locks on a connection to `engine`'s database (PostgreSQL), opened at the first."""
        url = engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._conn: AsyncConnection[tuple[bool]] | None = None
        self._using = asyncio.Lock()  # one statement at a time on the connection
        # How many times this process took each lock (a lock is re-entrant within a session).
        self._held: Counter[int] = Counter()
        self._giving_back: set[asyncio.Future[None]] = set()  # kept until done, never collected

    async def take(self, owner_id: str) -> bool:
        """Take the owner's lock if no other process holds it; True when taken.

        A caller cancelled while the database answers never leaves the lock
        behind: a lock granted after it gave up is given back.

        Raises:
            StoreError: the database cannot be reached.
        """
        key = lock_key(owner_id)
        taking = asyncio.ensure_future(self._take(key))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(lambda done: self._abandoned(done, owner_id))
            raise

    async def give_back(self, owner_id: str) -> None:
        """Let go of the owner's lock; never raises (a broken connection let go of it already)."""
        key = lock_key(owner_id)
        async with self._using:
            if self._held[key] <= 0:
                return
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
            if self._conn is None:
                return  # the connection broke: the server let go of it then
            try:
                await self._execute(_GIVE_BACK, key)
            except StoreError as exc:
                log.warning("round_lock.give_back_failed", owner_id=owner_id, error=str(exc))
                await self._drop()

    async def close(self) -> None:
        """Close the lock connection; the server lets go of whatever it still held."""
        async with self._using:
            await self._drop()

    async def _take(self, key: int) -> bool:
        async with self._using:
            try:
                taken = await self._execute(_TAKE, key)
            except StoreError:
                # Once more on a new connection: the old one may have been cut.
                await self._drop()
                taken = await self._execute(_TAKE, key)
            if taken:
                self._held[key] += 1
            return taken

    def _abandoned(self, done: asyncio.Future[bool], owner_id: str) -> None:
        """Give back a lock granted to a caller that was cancelled meanwhile."""
        if not done.cancelled() and done.exception() is None and done.result():
            giving = asyncio.ensure_future(self.give_back(owner_id))
            self._giving_back.add(giving)
            giving.add_done_callback(self._giving_back.discard)

    async def _execute(self, statement: LiteralString, key: int) -> bool:
        """Run one lock statement on the lock connection (opened, and its locks retaken, if needed).

        Raises:
            StoreError: the database failed.
        """
        import psycopg

        try:
            conn = await self._connection()
            row = await (await conn.execute(statement, (key,))).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"could not reach the round locks: {describe(exc)}") from None
        return bool(row and row[0])

    async def _connection(self) -> AsyncConnection[tuple[bool]]:
        if self._conn is not None:
            return self._conn
        import psycopg

        # Every statement commits at once: no transaction stays open for a round's length.
        conn: AsyncConnection[tuple[bool]] = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )
        self._conn = conn
        for key, times in sorted(self._held.items()):
            for _ in range(times):
                row = await (await conn.execute(_TAKE, (key,))).fetchone()
                if not (row and row[0]):
                    # Taken by another process while the old connection was down.
                    del self._held[key]
                    log.warning("round_lock.lost", key=key)
                    break
        return conn

    async def _drop(self) -> None:
        """Close the lock connection for good; the server lets go of the locks it held."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            await conn.close()
        except OSError as exc:
            log.debug("round_lock.close_failed", error=type(exc).__name__)
