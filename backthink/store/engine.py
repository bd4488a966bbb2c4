"""The async engine: SQLite tuned for one writer and concurrent readers, or PostgreSQL.

PostgreSQL URLs name their driver: `postgresql+psycopg://` (psycopg 3, a
dependency, the one procrastinate shares) or `postgresql+asyncpg://` where
asyncpg is installed; a plain `postgresql://` means psycopg. The driver is
imported only when such a URL is opened, so a SQLite daemon never loads it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, InvalidRequestError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from backthink.config import paths
from backthink.config.paths import is_memory, sqlite_path
from backthink.errors import StoreError

BUSY_TIMEOUT_MS = 5000  # milliseconds a SQLite writer waits for another writer's lock
"""Long enough to ride out the chat app's short writes, short enough to fail a stuck round."""

_SQLITE_ASYNC_DRIVER = "sqlite+aiosqlite"
_POSTGRES_DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
"""Driverless PostgreSQL URLs and the async driver they mean."""
_POSTGRES_ASYNC = ("psycopg", "asyncpg")
"""The PostgreSQL drivers with an asyncio mode SQLAlchemy supports."""
POOL_SIZE = 5
"""PostgreSQL connections kept open per process (more open for bursts, up to POOL_OVERFLOW)."""
POOL_OVERFLOW = 10


def create_engine(
    url: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, read_only: bool = False
) -> AsyncEngine:
    """Create the async engine for a database URL.

    For SQLite the database's folder is created if missing, a plain `sqlite://`
    URL gets the aiosqlite driver, and every connection runs in WAL mode (the
    chat app can write while the daemon reads) with a busy timeout, foreign
    keys on and `synchronous=NORMAL`. In-memory URLs share one connection.

    Args:
        url: an SQLAlchemy URL with an async driver, e.g. `sqlite+aiosqlite:///var/backthink.db`.
        busy_timeout_ms: how long a SQLite writer waits for a lock, in milliseconds.
        read_only: open a SQLite file for reading only, as it is now (for a file in a
            folder this process cannot write: SQLite could not keep its journal there).

    Raises:
        StoreError: the URL is malformed or the database folder cannot be created.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        # The URL may hold a password, so it is not repeated.
        raise StoreError("database url is not a valid SQLAlchemy URL") from None
    if parsed.drivername in _POSTGRES_DRIVERS or parsed.get_backend_name() == "postgresql":
        return _postgres_engine(parsed)
    if parsed.get_backend_name() != "sqlite":
        return _async_engine(parsed)
    if parsed.drivername == "sqlite":
        parsed = parsed.set(drivername=_SQLITE_ASYNC_DRIVER)
    if busy_timeout_ms < 0:
        raise ValueError("busy_timeout_ms must not be negative")
    if is_memory(parsed):
        engine = create_async_engine(parsed, poolclass=StaticPool)
    elif read_only:
        path = sqlite_path(parsed)
        assert path is not None
        # immutable: no journal, no lock files; a writer elsewhere is seen at the next open.
        engine = create_async_engine(
            f"{_SQLITE_ASYNC_DRIVER}:///file:{path}?mode=ro&immutable=1&uri=true"
        )
    else:
        _make_parent_dir(parsed)
        engine = create_async_engine(parsed)
    tune_sqlite(engine.sync_engine, busy_timeout_ms, read_only=read_only)
    return engine


def _postgres_engine(url: URL) -> AsyncEngine:
    """A pooled engine for a PostgreSQL URL, its driver checked and named in any error."""
    url = url.set(drivername=_POSTGRES_DRIVERS.get(url.drivername, url.drivername))
    driver = url.get_driver_name()
    if driver not in _POSTGRES_ASYNC:
        raise StoreError(
            f"database url driver {driver!r} is not supported: use postgresql+psycopg://"
            " (or postgresql+asyncpg:// with asyncpg installed)"
        )
    return _async_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, pool_pre_ping=True)


def _async_engine(url: URL, **options: Any) -> AsyncEngine:
    """`create_async_engine`, its driver failures as one line that never repeats the URL."""
    try:
        return create_async_engine(url, **options)
    except ImportError as exc:
        package = (exc.name or url.get_driver_name()).partition(".")[0]
        raise StoreError(
            f"database url needs the {package} driver, which is not installed"
            f" (pip install {package})"
        ) from None
    except NoSuchModuleError:
        raise StoreError(f"database url names an unknown driver {url.drivername!r}") from None
    except InvalidRequestError:
        raise StoreError(
            f"database url driver {url.get_driver_name()!r} has no asyncio mode"
        ) from None


def _make_parent_dir(url: URL) -> None:
    path = sqlite_path(url)
    assert path is not None, "only a SQLite file has a folder to create"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create database folder {path.parent}: {paths.folder_problem(path.parent, exc)}"
        ) from None


def tune_sqlite(engine: Engine, busy_timeout_ms: int, *, read_only: bool = False) -> None:
    """Install the per-connection PRAGMAs and SQLAlchemy-controlled transactions.

    A read-only connection keeps the journal mode the file has.
    """

    # The DB-API connection here is aiosqlite's adapter; `isolation_level` is a
    # sqlite3 attribute outside the DB-API protocol that SQLAlchemy types it by.
    def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # sqlite3's legacy mode only sends BEGIN before DML, so DDL and reads
        # would run outside the transaction; SQLAlchemy sends BEGIN instead.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout comes first: switching to WAL may itself wait for a lock.
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not read_only:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            # In WAL mode NORMAL is still corruption-safe and skips an fsync per commit.
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    def on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
