"""SqlOwnerStore: owners in the `owner` table.

The distributed worker keeps its schedule in the same rows (`next_due_at`,
`greeted_at`) and claims them itself (`backthink.store.claims`), in the
transaction that queues their rounds.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import delete, insert, text, update
from sqlalchemy.engine import Connection, RowMapping
from sqlmodel import col, select

from backthink.models import Owner
from backthink.store.database import Database
from backthink.store.failures import describe, store_errors
from backthink.store.tables import OwnerRow

log = structlog.get_logger(__name__)

_FIELDS = tuple(Owner.model_fields)
SYNC_LOCK = 7303180432  # PostgreSQL advisory lock held while the config file's owners are written


def owner_values(owner: Owner) -> dict[str, Any]:
    """The row values of an owner (its schedule columns are left alone)."""
    values = dict(owner)
    values["channels"] = json.dumps(owner.channels, ensure_ascii=False, sort_keys=True)
    values["gate"] = json.dumps(owner.gate, ensure_ascii=False, sort_keys=True)
    return values


def to_owner(row: RowMapping) -> Owner:
    """The owner of a row."""
    values = {name: row[name] for name in _FIELDS}
    values["channels"] = json.loads(row["channels"])
    values["gate"] = json.loads(row["gate"])
    return Owner.model_validate(values)


def readable_owner(row: RowMapping) -> Owner | None:
    """The owner of a row, or None (logged) for a row that does not validate.

    Other programs may write the owner table: one row with an unknown time
    zone or language must not keep every other owner from being read.
    """
    try:
        return to_owner(row)
    except (ValidationError, ValueError) as exc:
        problem = describe(exc) if isinstance(exc, ValidationError) else "malformed JSON"
        log.warning("owners.row_unreadable", owner_id=str(row["id"])[:64], problem=problem)
        return None


def _put(conn: Connection, owner: Owner, at: datetime) -> None:
    values = {**owner_values(owner), "updated_at": at.astimezone(UTC)}
    changed = conn.execute(update(OwnerRow).where(col(OwnerRow.id) == owner.id).values(**values))
    if changed.rowcount == 0:
        conn.execute(insert(OwnerRow), values)


class SqlOwnerStore:
    """The OwnerStore on SQL."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def list(self, *, enabled_only: bool = False) -> builtins.list[Owner]:
        """Return every owner (or the enabled ones), by id."""
        query = select(OwnerRow)
        if enabled_only:
            query = query.where(col(OwnerRow.enabled))
        query = query.order_by(col(OwnerRow.id))
        with store_errors("could not read owners"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
        return [owner for row in rows if (owner := readable_owner(row)) is not None]

    async def get(self, owner_id: str) -> Owner | None:
        """Return the owner with this id, or None."""
        query = select(OwnerRow).where(col(OwnerRow.id) == owner_id)
        with store_errors("could not read owners"):
            row = await self._db.read(lambda c: c.execute(query).mappings().first())
        if row is None:
            return None
        with store_errors(f"owner {owner_id!r} in the owner table cannot be read"):
            return to_owner(row)

    async def put(self, owner: Owner, *, at: datetime) -> None:
        """Insert the owner, or replace what it says (its schedule stays)."""
        with store_errors(f"could not store owner {owner.id!r}"):
            await self._db.write(lambda c: _put(c, owner, at))

    async def put_many(self, owners: Sequence[Owner], *, at: datetime) -> None:
        """Insert or replace many owners in one transaction (an import, a benchmark)."""

        def run(conn: Connection) -> None:
            for owner in owners:
                _put(conn, owner, at)

        with store_errors("could not store owners"):
            await self._db.write(run)

    async def remove(self, owner_id: str) -> bool:
        """Delete the owner's row (its messages and rounds stay); False if there is none."""
        statement = delete(OwnerRow).where(col(OwnerRow.id) == owner_id)
        with store_errors(f"could not remove owner {owner_id!r}"):
            removed = await self._db.write(lambda c: c.execute(statement).rowcount)
            return bool(removed)

    async def sync_config(self, owners: Sequence[Owner], *, at: datetime) -> None:
        """Make the config file's owners the rows of source `config`, in one transaction.

        Each is written as the file says; a `config` row the file no longer
        names is deleted. Rows managed with `backthink owners` are untouched.
        """
        ids = [owner.id for owner in owners]
        stale = delete(OwnerRow).where(
            col(OwnerRow.source) == "config", col(OwnerRow.id).not_in(ids)
        )
        current = select(OwnerRow).where(col(OwnerRow.id).in_(ids))

        def run(conn: Connection) -> None:
            if conn.dialect.name == "postgresql":
                # Workers starting together write the same rows one at a time.
                conn.execute(text(f"SELECT pg_advisory_xact_lock({SYNC_LOCK})"))
            rows = {row["id"]: row for row in conn.execute(current).mappings()}
            for owner in owners:
                row = rows.get(owner.id)
                # An unchanged row is not rewritten: every worker syncs at start.
                if row is None or readable_owner(row) != owner:
                    _put(conn, owner, at)
            conn.execute(stale)

        with store_errors("could not store the config file's owners"):
            await self._db.write(run)
