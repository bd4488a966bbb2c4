"""Schema migrations: alembic, run in-process on the engine's own connection.

Alembic is imported only when the schema is not current: a daemon that
restarts on an up-to-date database reads one row and starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.errors import StoreError
from backthink.store.failures import describe, store_errors

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = Path(__file__).with_name("migrations")
"""env.py, script.py.mako and versions/ ship inside the package, so no alembic.ini is needed."""

HEAD_REVISION = "0004"
"""The newest revision under migrations/versions; a test keeps the two in step."""


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


def _current(connection: Connection) -> str | None:
    try:
        row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
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
            await conn.run_sync(_upgrade)
