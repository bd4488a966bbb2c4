"""SqlOutbox: the delivery table, written in one transaction with the write-back message."""

from __future__ import annotations

import builtins
from datetime import UTC, datetime

from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backthink.models import Delivery, DeliveryStatus, Message, OutgoingMessage, RoundRecord
from backthink.store.failures import store_errors
from backthink.store.messages import _row_values
from backthink.store.tables import DeliveryRow, MessageRow


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
        "round_record": delivery.round_record.model_dump_json() if delivery.round_record else None,
    }


def _to_delivery(row: DeliveryRow) -> Delivery:
    return Delivery(
        id=row.id,
        owner_id=row.owner_id,
        channel=row.channel,
        message=OutgoingMessage.model_validate_json(row.payload),
        status=DeliveryStatus(row.status),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        created_at=row.created_at,
        updated_at=row.updated_at,
        round_record=RoundRecord.model_validate_json(row.round_record)
        if row.round_record
        else None,
    )


class SqlOutbox:
    """The outbox on an SQLAlchemy async engine. The round id is the idempotency key."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Use `engine`, which must already be migrated."""
        self._engine = engine

    def _session(self) -> AsyncSession:
        return AsyncSession(self._engine, expire_on_commit=False)

    async def commit(self, delivery: Delivery, writeback: Message) -> bool:
        """Store the outbox row and the write-back message in ONE transaction.

        Returns:
            False when a delivery with this id already exists ("already done":
            nothing is written a second time).

        Raises:
            StoreError: the database failed; then neither row is stored.
        """
        with store_errors("could not commit delivery"):
            try:
                async with self._session() as session, session.begin():
                    await session.exec(insert(DeliveryRow), params=[_to_row(delivery)])
                    await session.exec(insert(MessageRow), params=[_row_values(writeback)])
            except IntegrityError:
                if await self.get(delivery.id) is not None:
                    return False
                raise
        return True

    async def get(self, delivery_id: str) -> Delivery | None:
        """Return one delivery, or None."""
        with store_errors("could not read delivery"):
            async with self._session() as session:
                row = await session.get(DeliveryRow, delivery_id)
                return None if row is None else _to_delivery(row)

    async def pending(self, *, limit: int = 100) -> builtins.list[Delivery]:
        """Return pending deliveries, the earliest due first."""
        query = (
            select(DeliveryRow)
            .where(col(DeliveryRow.status) == DeliveryStatus.PENDING.value)
            .order_by(col(DeliveryRow.next_attempt_at), col(DeliveryRow.created_at))
            .limit(limit)
        )
        with store_errors("could not read deliveries"):
            async with self._session() as session:
                return [_to_delivery(row) for row in (await session.exec(query)).all()]

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
        """Record the result of a delivery attempt."""
        statement = (
            update(DeliveryRow)
            .where(col(DeliveryRow.id) == delivery_id)
            .values(
                status=status.value,
                attempts=attempts,
                next_attempt_at=next_attempt_at,
                last_error=last_error,
                updated_at=at.astimezone(UTC),
            )
        )
        with store_errors("could not update delivery"):
            async with self._session() as session, session.begin():
                await session.exec(statement)
