"""Alembic environment: migrates on the connection that `backthink.store.migrate` hands over."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.engine import Connection

from backthink.store.columns import UTCDateTime
from backthink.store.fulltext import is_fulltext
from backthink.store.tables import metadata


def _render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Write UTCDateTime as a plain timestamptz, so revisions never import backthink code."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Leave the full-text indexes (written by hand) out of comparisons."""
    return not is_fulltext(name, type_)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
        include_name=_include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


_connection = context.config.attributes.get("connection")
if context.is_offline_mode() or not isinstance(_connection, Connection):
    raise RuntimeError(
        "backthink migrations run on a live connection: use backthink.store.migrate(engine)"
    )
_run(_connection)
