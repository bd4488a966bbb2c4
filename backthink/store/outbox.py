"""SqlOutbox: the delivery table, written in one transaction with the write-back message."""

from __future__ import annotations

import builtins
from datetime import UTC, datetime

from sqlalchemy import bindparam, insert, update
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from backthink.errors import StoreError
from backthink.models import Message
from backthink.records import Delivery, DeliveryStatus, OutgoingMessage
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.messages import message_values
from backthink.store.tables import DeliveryRow, MessageRow, RoundRow

# Built once: a delivered round commits one row of each and updates its delivery.
_INSERT_DELIVERY = insert(DeliveryRow)
_INSERT_MESSAGE = insert(MessageRow)
_MARK_UNDELIVERED = (
    update(MessageRow)
    .where(col(MessageRow.round_id) == bindparam("delivery_id"))
    .values(undelivered=True)
)
_REROUTE_WRITEBACK = (
    update(MessageRow)
    .where(col(MessageRow.round_id) == bindparam("delivery_id"))
    .values(channel=bindparam("new_channel"), undelivered=False)
)
_REROUTE_DELIVERY = (
    update(DeliveryRow)
    .where(col(DeliveryRow.id) == bindparam("delivery_id"))
    .values(
        channel=bindparam("new_channel"),
        status=DeliveryStatus.PENDING.value,
        next_attempt_at=bindparam("next_attempt_at"),
        updated_at=bindparam("updated_at"),
    )
)
_UPDATE_DELIVERY = (
    update(DeliveryRow)
    .where(col(DeliveryRow.id) == bindparam("delivery_id"))
    .values(
        status=bindparam("status"),
        attempts=bindparam("attempts"),
        next_attempt_at=bindparam("next_attempt_at"),
        last_error=bindparam("last_error"),
        updated_at=bindparam("updated_at"),
    )
)


def _to_row(delivery: Delivery) -> dict[str, object]:
    return {
        "id": delivery.id,
        "owner_id": delivery.owner_id,
        "channel": delivery.channel,
        "payload": delivery.message.model_dump_json(),
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
        "trigger": delivery.trigger,
    }


def _to_delivery(row: RowMapping) -> Delivery:
    return Delivery(
        id=row["id"],
        owner_id=row["owner_id"],
        channel=row["channel"],
        message=OutgoingMessage.model_validate_json(row["payload"]),
        status=DeliveryStatus(row["status"]),
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        trigger=row["trigger"],
    )


class SqlOutbox:
    """The outbox on SQL. The round id is the idempotency key."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated."""
        self._db = db

    async def commit(self, delivery: Delivery, writeback: Message) -> bool:
        """Store the outbox row and the write-back message in ONE transaction.

        Returns:
            False when a delivery with this id already exists ("already done":
            nothing is written a second time).

        Raises:
            StoreError: the database failed; then none of the rows is stored.
        """
        row, message = _to_row(delivery), message_values(writeback)

        def both(conn: Connection) -> None:
            conn.execute(_INSERT_DELIVERY, row)
            conn.execute(_INSERT_MESSAGE, message)

        with store_errors("could not commit delivery"):
            try:
                await self._db.write(both)
            except IntegrityError:
                if await self.get(delivery.id) is not None:
                    return False
                raise
        return True

    async def get(self, delivery_id: str) -> Delivery | None:
        """Return one delivery, or None."""
        query = select(DeliveryRow).where(col(DeliveryRow.id) == delivery_id)
        with store_errors("could not read delivery"):
            row = await self._db.read(lambda c: c.execute(query).mappings().first())
            return None if row is None else _to_delivery(row)

    async def pending(
        self, *, limit: int = 100, owner_id: str | None = None
    ) -> builtins.list[Delivery]:
        """Return pending deliveries (of one owner, or all), the earliest due first."""
        query = select(DeliveryRow).where(col(DeliveryRow.status) == DeliveryStatus.PENDING.value)
        if owner_id is not None:
            query = query.where(col(DeliveryRow.owner_id) == owner_id)
        query = query.order_by(col(DeliveryRow.next_attempt_at), col(DeliveryRow.created_at))
        query = query.limit(limit)
        with store_errors("could not read deliveries"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return [_to_delivery(row) for row in rows]

    async def unrecorded(
        self, *, since: datetime, limit: int = 100, owner_id: str | None = None
    ) -> builtins.list[Delivery]:
        """Return deliveries created at or after `since` whose round has no record, oldest first."""
        query = (
            select(DeliveryRow)
            .outerjoin(RoundRow, col(RoundRow.id) == col(DeliveryRow.id))
            .where(col(DeliveryRow.created_at) >= since.astimezone(UTC), col(RoundRow.id).is_(None))
        )
        if owner_id is not None:
            query = query.where(col(DeliveryRow.owner_id) == owner_id)
        query = query.order_by(col(DeliveryRow.created_at)).limit(limit)
        with store_errors("could not read deliveries"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return [_to_delivery(row) for row in rows]

    async def update(
        self,
        delivery_id: str,
        *,
        status: DeliveryStatus,
        attempts: int,
        next_attempt_at: datetime | None,
        last_error: str | None,
        at: datetime,
    ) -> None:
        """Record the result of a delivery attempt; a failure marks the write-back undelivered.

        The write-back stays in the session (it counts for duplicates and rate
        limits) but the model is no longer shown it as said.
        """
        values = {
            "delivery_id": delivery_id,
            "status": status.value,
            "attempts": attempts,
            "next_attempt_at": next_attempt_at,
            "last_error": last_error,
            "updated_at": at.astimezone(UTC),
        }
        failed = status is DeliveryStatus.FAILED

        def record(conn: Connection) -> None:
            conn.execute(_UPDATE_DELIVERY, values)
            if failed:
                conn.execute(_MARK_UNDELIVERED, {"delivery_id": delivery_id})

        with store_errors("could not update delivery"):
            await self._db.write(record)

    async def reroute(self, delivery_id: str, channel: str, *, at: datetime) -> Delivery:
        """Move a failed delivery and its write-back to another channel, pending again.

        Raises:
            StoreError: the database failed, or there is no such delivery.
        """
        values = {
            "delivery_id": delivery_id,
            "new_channel": channel,
            "next_attempt_at": at.astimezone(UTC),
            "updated_at": at.astimezone(UTC),
        }

        def both(conn: Connection) -> None:
            conn.execute(_REROUTE_DELIVERY, values)
            conn.execute(_REROUTE_WRITEBACK, values)

        with store_errors("could not reroute delivery"):
            await self._db.write(both)
        moved = await self.get(delivery_id)
        if moved is None:
            raise StoreError(f"could not reroute delivery: no delivery {delivery_id!r}")
        return moved
