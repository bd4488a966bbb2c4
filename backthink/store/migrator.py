"""Schema migrations: alembic, run in-process on the engine's own connection.

Alembic is imported only when an existing schema is behind: a daemon that
restarts on an up-to-date database reads one row and starts, and a new
database gets the current tables straight from the metadata, stamped with
the head revision (a test keeps that schema identical to the migrated one).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.errors import StoreError
from backthink.store.failures import describe, store_errors
from backthink.store.fulltext import create_fulltext
from backthink.store.tables import metadata

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = Path(__file__).with_name("migrations")
"""env.py, script.py.mako and versions/ ship inside the package, so no alembic.ini is needed."""

HEAD_REVISION = "0015"
"""The newest revision under migrations/versions; a test keeps the two in step."""

VERSION_TABLE = "alembic_version"
MIGRATION_LOCK = 7303180430  # PostgreSQL advisory lock held while one process migrates


def alembic_config(connection: Connection | None = None) -> Config:
    """Build the alembic configuration, optionally bound to an open connection.

    `migrations/env.py` runs on `config.attributes["connection"]`. A new
    revision can be written with `alembic.command.revision(alembic_config(conn),
    message, autogenerate=True)` inside `AsyncConnection.run_sync`.
    """
    from alembic.config import Config

    config = Config()
    # configparser reads "%" as interpolation, so a path holding one is escaped.
    config.set_main_option("script_location", str(SCRIPT_LOCATION).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection) -> None:
    from alembic import command
    from alembic.util import CommandError

    try:
        command.upgrade(alembic_config(connection), "head")
    except CommandError as exc:
        raise StoreError(f"could not migrate the database: {describe(exc)}") from None


def _create_current(connection: Connection) -> bool:
    """Create the newest schema in a database that has none of backthink's tables yet.

    Returns:
        False, creating nothing, when any of the tables already exists.
    """
    existing = set(inspect(connection).get_table_names())
    if existing & ({VERSION_TABLE} | set(metadata.tables)):
        return False
    metadata.create_all(connection)
    # Virtual tables and triggers are no part of the metadata; the revision that
    # added them runs the same statements.
    create_fulltext(connection)
    # The same table alembic keeps, so later revisions upgrade from here.
    version = Table(
        VERSION_TABLE,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
    )
    version.create(connection)
    connection.execute(version.insert().values(version_num=HEAD_REVISION))
    return True


def _current(connection: Connection) -> str | None:
    if connection.dialect.name == "postgresql" and not inspect(connection).has_table(VERSION_TABLE):
        # A failed statement would abort PostgreSQL's transaction: look before reading.
        return None
    try:
        row = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
    except SQLAlchemyError:
        return None  # a new database has no version table yet
    return None if row is None else str(row[0])


async def migrate(engine: AsyncEngine) -> None:
    """Upgrade the database schema to the newest revision; a current schema is left as is.

    Alembic's logging is never configured here, so its INFO lines stay quiet
    unless the application routes the `alembic` logger somewhere.

    Raises:
        StoreError: the database cannot be opened or a revision failed.
    """
    with store_errors("could not migrate the database"):
        async with engine.connect() as conn:
            if await conn.run_sync(_current) == HEAD_REVISION:
                return
        async with engine.begin() as conn:
            if engine.url.get_backend_name() == "postgresql":
                # Workers starting together on one database migrate it one at a
                # time; the lock ends with the transaction, and the others find
                # the schema current.
                await conn.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
                if await conn.run_sync(_current) == HEAD_REVISION:
                    return
            if not await conn.run_sync(_create_current):
                await conn.run_sync(_upgrade)


async def schema_version(engine: AsyncEngine) -> str | None:
    """The revision the database's schema is at (None: no schema yet), read without writing.

    Raises:
        StoreError: the database cannot be read.
    """
    with store_errors("could not read the database"):
        async with engine.connect() as conn:
            return await conn.run_sync(_current)


def unwritable(path: Path | None) -> str | None:
    """Why this process cannot write a SQLite file and its journal, or None when it can.

    SQLite writes the file and keeps its journal (`-wal`, `-shm`) beside it, so
    both the file and its folder must be writable.
    """
    if path is None or not path.parent.is_dir():
        return None
    if path.exists():
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as exc:
            return f"{path} is read-only ({exc.strerror})"
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        return f"its folder {path.parent} is read-only ({exc.strerror})"
    return None
