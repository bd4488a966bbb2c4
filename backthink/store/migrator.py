"""Schema migrations: alembic, run in-process on the engine's own connection."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from backthink.store.failures import store_errors

SCRIPT_LOCATION = Path(__file__).with_name("migrations")
"""env.py, script.py.mako and versions/ ship inside the package, so no alembic.ini is needed."""


def alembic_config(connection: Connection | None = None) -> Config:
    """Build the alembic configuration, optionally bound to an open connection.

    `migrations/env.py` runs on `config.attributes["connection"]`. A new
    revision can be written with `alembic.command.revision(alembic_config(conn),
    message, autogenerate=True)` inside `AsyncConnection.run_sync`.
    """
    config = Config()
    # configparser reads "%" as interpolation, so a path holding one is escaped.
    config.set_main_option("script_location", str(SCRIPT_LOCATION).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


async def migrate(engine: AsyncEngine) -> None:
    """Upgrade the database schema to the newest revision; a current schema is left as is.

    Alembic's logging is never configured here, so its INFO lines stay quiet
    unless the application routes the `alembic` logger somewhere.

    Raises:
        StoreError: the database cannot be opened or a revision failed.
    """
    with store_errors("could not migrate the database"):
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade)
