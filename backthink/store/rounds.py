"""SqlRoundStore: the audit log of rounds in the `round` table."""

from __future__ import annotations

import builtins
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, false, insert
from sqlalchemy.engine import RowMapping
from sqlmodel import col, select

from backthink.records import RoundRecord
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import MarkRow, RoundRow

INSERT_ROUND = insert(RoundRow)  # built once: a round is saved on every heartbeat


def round_values(record: RoundRecord) -> dict[str, Any]:
    values = dict(record)
    values["outcome"] = record.outcome.value
    values["urgency"] = record.urgency.value if record.urgency is not None else None
    values["notes"] = json.dumps(list(record.notes), ensure_ascii=False)
    values["tools"] = json.dumps([use.model_dump() for use in record.tools])
    values["recalled"] = json.dumps([ref.model_dump() for ref in record.recalled])
    values["offered"] = json.dumps(list(record.offered), ensure_ascii=False)
    return values


def _to_record(row: RowMapping) -> RoundRecord:
    values = {name: row[name] for name in RoundRecord.model_fields}
    values["notes"] = json.loads(row["notes"])
    values["tools"] = json.loads(row["tools"])
    values["recalled"] = json.loads(row["recalled"])
    values["offered"] = json.loads(row["offered"])
    return RoundRecord.model_validate(values)


class SqlRoundStore:
    """The RoundStore on SQL; raw replies stay in the database."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def save(self, record: RoundRecord) -> None:
        """Store a finished round.

        Raises:
            StoreError: the database failed, or a round with this id is already stored.
        """
        values = round_values(record)
        # A second save of the same id fails on the primary key, inside the database.
        with store_errors(f"could not save round {record.id!r}"):
            await self._db.write(lambda c: c.execute(INSERT_ROUND, values))

    async def check_writable(self) -> None:
        """Take the write lock a round's record needs and write nothing.

        Raises:
            StoreError: the database cannot be written (read-only, locked past the
                busy timeout, deleted while running).
        """
        nothing = delete(MarkRow).where(false())
        with store_errors("cannot write to the database"):
            await self._db.write(lambda c: c.execute(nothing))

    async def get(self, round_id: str) -> RoundRecord | None:
        """Return the round with this id, or None if there is none."""
        query = select(RoundRow).where(col(RoundRow.id) == round_id)
        with store_errors(f"could not read round {round_id!r}"):
            row = await self._db.read(lambda c: c.execute(query).mappings().first())
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
        query = query.limit(limit)
        with store_errors("could not read rounds"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return [_to_record(row) for row in rows]

    async def started_between(
        self, owner_id: str, start: datetime, end: datetime, *, limit: int = 1000
    ) -> builtins.list[RoundRecord]:
        """Return an owner's rounds started in [start, end), oldest first, at most `limit`."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        query = (
            select(RoundRow)
            .where(
                col(RoundRow.owner_id) == owner_id,
                col(RoundRow.started_at) >= start.astimezone(UTC),
                col(RoundRow.started_at) < end.astimezone(UTC),
            )
            .order_by(col(RoundRow.started_at), col(RoundRow.id))
            .limit(limit)
        )
        with store_errors("could not read rounds"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return [_to_record(row) for row in rows]

    async def last_asked(self, owner_id: str, since: datetime) -> RoundRecord | None:
        """The owner's newest round started at or after `since` that called the model, or None.

        A round that called the model carries its digest; the walk back is one
        range of `ix_round_owner_started`, bounded by `since`.
        """
        query = (
            select(RoundRow)
            .where(
                col(RoundRow.owner_id) == owner_id,
                col(RoundRow.started_at) >= since.astimezone(UTC),
                col(RoundRow.digest).is_not(None),
            )
            .order_by(col(RoundRow.started_at).desc(), col(RoundRow.id).desc())
            .limit(1)
        )
        with store_errors("could not read rounds"):
            row = await self._db.read(lambda c: c.execute(query).mappings().first())
            return None if row is None else _to_record(row)
