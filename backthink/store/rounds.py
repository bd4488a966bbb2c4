"""SqlRoundStore: the audit log of rounds in the `round` table."""

from __future__ import annotations

import builtins
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backthink.models import RoundRecord
from backthink.store.failures import store_errors
from backthink.store.tables import MarkRow, RoundRow


def _row_values(record: RoundRecord) -> dict[str, Any]:
    values = dict(record)
    values["outcome"] = record.outcome.value
    values["urgency"] = record.urgency.value if record.urgency is not None else None
    values["notes"] = json.dumps(list(record.notes), ensure_ascii=False)
    return values


def _to_record(row: RoundRow) -> RoundRecord:
    values = {name: getattr(row, name) for name in RoundRecord.model_fields}
    values["notes"] = json.loads(row.notes)
    return RoundRecord.model_validate(values)


class SqlRoundStore:
    """The RoundStore on an SQLAlchemy async engine; raw replies stay in the database."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Use `engine`, which must already be migrated (see `migrate`)."""
        self._engine = engine

    def _session(self) -> AsyncSession:
        return AsyncSession(self._engine, expire_on_commit=False)

    async def save(self, record: RoundRecord) -> None:
        """Store a finished round.

        Raises:
            StoreError: the database failed, or a round with this id is already stored.
        """
        # A second save of the same id fails on the primary key, inside the database.
        with store_errors(f"could not save round {record.id!r}"):
            async with self._session() as session, session.begin():
                await session.exec(insert(RoundRow), params=_row_values(record))

    async def get(self, round_id: str) -> RoundRecord | None:
        """Return the round with this id, or None if there is none."""
        with store_errors(f"could not read round {round_id!r}"):
            async with self._session() as session:
                row = await session.get(RoundRow, round_id)
                return None if row is None else _to_record(row)

    async def list(
        self, *, owner_id: str | None = None, trigger: str | None = None, limit: int = 20
    ) -> builtins.list[RoundRecord]:
        """Return rounds newest first (by start time, then id), optionally for one owner/trigger."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        query = select(RoundRow)
        if owner_id is not None:
            query = query.where(col(RoundRow.owner_id) == owner_id)
        if trigger is not None:
            query = query.where(col(RoundRow.trigger) == trigger)
        query = query.order_by(col(RoundRow.started_at).desc(), col(RoundRow.id).desc())
        with store_errors("could not read rounds"):
            async with self._session() as session:
                rows = (await session.exec(query.limit(limit))).all()
                return [_to_record(row) for row in rows]

    async def marked_at(self, owner_id: str, name: str) -> datetime | None:
        """When the named mark was last set for this owner, or None."""
        with store_errors("could not read mark"):
            async with self._session() as session:
                row = await session.get(MarkRow, (owner_id, name))
                return None if row is None else row.at

    async def mark(self, owner_id: str, name: str, at: datetime) -> None:
        """Set a named mark for this owner to `at` (insert or replace)."""
        values = {"owner_id": owner_id, "name": name, "at": at.astimezone(UTC)}
        with store_errors("could not write mark"):
            async with self._session() as session, session.begin():
                result = await session.exec(
                    update(MarkRow)
                    .where(col(MarkRow.owner_id) == owner_id, col(MarkRow.name) == name)
                    .values(at=values["at"])
                )
                if result.rowcount == 0:
                    await session.exec(insert(MarkRow), params=values)
