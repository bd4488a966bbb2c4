"""The marks: named timestamps of owners and of model endpoints, in the `mark` table or in memory.

The table keys a mark by (owner_id, name). An endpoint's marks are kept there
under the owner id `*`, with the endpoint folded into the name as a short
digest of its address and model (`tools_refused:<16 hex>`): the layout every
database written so far holds, so a refusal learned before an upgrade still
counts after it. That mapping lives here, at the edge; the rest of backthink
speaks of `EndpointKey`s.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import delete, insert, update
from sqlalchemy.engine import Connection
from sqlmodel import col, select

from backthink.ports import EndpointKey, MarkKey
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import MarkRow

ENDPOINT_ROW: Final = "*"
"""The owner id under which the table keeps endpoints' marks."""
ENDPOINT_DIGEST_CHARS: Final = 16  # hex characters of the endpoint's digest in a row's name


def mark_row(key: MarkKey, name: str) -> tuple[str, str]:
    """The (owner_id, name) of the row that keeps the mark `name` of `key`."""
    if isinstance(key, EndpointKey):
        endpoint = f"{key.base_url}\n{key.model}".encode()
        digest = hashlib.sha256(endpoint).hexdigest()[:ENDPOINT_DIGEST_CHARS]
        return ENDPOINT_ROW, f"{name}:{digest}"
    return key, name


class SqlMarks:
    """The Marks port on the `mark` table, shared by every process on the database."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def marked_at(self, key: MarkKey, name: str) -> datetime | None:
        """When the named mark of `key` was last set, or None.

        Raises:
            StoreError: the database cannot be read.
        """
        owner_id, row_name = mark_row(key, name)
        query = select(MarkRow.at).where(
            col(MarkRow.owner_id) == owner_id, col(MarkRow.name) == row_name
        )
        with store_errors("could not read mark"):
            at: datetime | None = await self._db.read(lambda c: c.execute(query).scalar())
            return at

    async def mark(self, key: MarkKey, name: str, at: datetime) -> None:
        """Set the named mark of `key` to `at` (insert or replace).

        Raises:
            StoreError: the database cannot be written.
        """
        owner_id, row_name = mark_row(key, name)
        values = {"owner_id": owner_id, "name": row_name, "at": at.astimezone(UTC)}

        def upsert(conn: Connection) -> None:
            changed = conn.execute(
                update(MarkRow)
                .where(col(MarkRow.owner_id) == owner_id, col(MarkRow.name) == row_name)
                .values(at=values["at"])
            )
            if changed.rowcount == 0:
                conn.execute(insert(MarkRow), values)

        with store_errors("could not write mark"):
            await self._db.write(upsert)

    async def clear(self, key: MarkKey, name: str) -> None:
        """Remove the named mark of `key`, if it is set.

        Raises:
            StoreError: the database cannot be written.
        """
        owner_id, row_name = mark_row(key, name)
        gone = delete(MarkRow).where(
            col(MarkRow.owner_id) == owner_id, col(MarkRow.name) == row_name
        )
        with store_errors("could not clear mark"):
            await self._db.write(lambda c: c.execute(gone))


class VolatileMarks:
    """The Marks port in a dict, keyed as the table keys its rows."""

    def __init__(self) -> None:
        """Start with no marks."""
        self._marks: dict[tuple[str, str], datetime] = {}

    async def marked_at(self, key: MarkKey, name: str) -> datetime | None:
        """When the named mark of `key` was last set, or None."""
        return self._marks.get(mark_row(key, name))

    async def mark(self, key: MarkKey, name: str, at: datetime) -> None:
        """Set the named mark of `key` to `at`."""
        self._marks[mark_row(key, name)] = at.astimezone(UTC)

    async def clear(self, key: MarkKey, name: str) -> None:
        """Remove the named mark of `key`, if it is set."""
        self._marks.pop(mark_row(key, name), None)
