"""The distributed worker's claims on the owner table, each in its own transaction.

A sweep claims the owners whose heartbeat is due (row locks with SKIP LOCKED,
so two sweeps never claim the same owner) and moves each one's next due
time; a start claims the owners not greeted within the cooldown. The
caller queues the claimed owners' rounds on the same connection, so the jobs
commit with the claim or not at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import col

from backthink.models import Owner
from backthink.store.owners import readable_owner
from backthink.store.tables import OwnerRow

QUEUE_SCHEMA_LOCK = 7303180431  # PostgreSQL advisory lock held while the queue's tables are made
_MOVE_DUE = (
    update(OwnerRow)
    .where(col(OwnerRow.id) == bindparam("owner"))
    .values(next_due_at=bindparam("due"))
)


@dataclass(frozen=True)
class Due:
    """One claimed owner row: the owner (None when the row does not validate) and its due time."""

    id: str
    owner: Owner | None
    due: datetime | None
    """None for an owner never scheduled yet."""


@dataclass
class Claim:
    """One transaction's claim: a connection to queue jobs on, and the rows' new due times."""

    connection: AsyncConnection
    moves: list[dict[str, Any]] = field(default_factory=list)

    def move(self, owner_id: str, due: datetime) -> None:
        """Set the owner's next due time when the claim commits."""
        self.moves.append({"owner": owner_id, "due": due})

    async def driver_connection(self) -> Any:
        """The driver's own connection of the transaction (procrastinate's psycopg one)."""
        raw = await self.connection.get_raw_connection()
        return raw.driver_connection


class OwnerClaims:
    """Claims owner rows for the worker's sweep and greetings."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @asynccontextmanager
    async def due(self, at: datetime, *, limit: int) -> AsyncIterator[tuple[list[Due], Claim]]:
        """Claim up to `limit` enabled owners due at `at`, the longest due first.

        The rows stay locked until the block ends; then their moves and
        whatever was queued on the claim's connection commit together.
        """
        when = at.astimezone(UTC)
        query = (
            select(OwnerRow)
            .where(
                col(OwnerRow.enabled),
                or_(col(OwnerRow.next_due_at).is_(None), col(OwnerRow.next_due_at) <= when),
            )
            .order_by(col(OwnerRow.next_due_at).nulls_first(), col(OwnerRow.id))
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        async with self._engine.connect() as conn, conn.begin():
            rows = (await conn.execute(query)).mappings().all()
            claim = Claim(conn)
            yield [Due(row["id"], readable_owner(row), row["next_due_at"]) for row in rows], claim
            if claim.moves:
                await conn.execute(_MOVE_DUE, claim.moves)

    @asynccontextmanager
    async def greetings(
        self, at: datetime, *, cooldown: timedelta
    ) -> AsyncIterator[tuple[list[str], Claim]]:
        """Claim the enabled owners not greeted within `cooldown` of `at`, marking them greeted."""
        when = at.astimezone(UTC)
        claim_rows = (
            update(OwnerRow)
            .where(
                col(OwnerRow.enabled),
                or_(
                    col(OwnerRow.greeted_at).is_(None),
                    col(OwnerRow.greeted_at) <= when - cooldown,
                ),
            )
            .values(greeted_at=when)
            .returning(col(OwnerRow.id))
        )
        async with self._engine.connect() as conn, conn.begin():
            owners = [row[0] for row in await conn.execute(claim_rows)]
            yield owners, Claim(conn)

    async def install_queue(self, schema: str) -> bool:
        """Create the queue's tables from `schema` once, whichever worker starts first.

        Returns:
            Whether this call created them.
        """
        async with self._engine.connect() as conn, conn.begin():
            await conn.execute(text(f"SELECT pg_advisory_xact_lock({QUEUE_SCHEMA_LOCK})"))
            exists = (await conn.execute(text("SELECT to_regclass('procrastinate_jobs')"))).scalar()
            if exists is not None:
                return False
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            async with driver.cursor() as cursor:
                await cursor.execute(schema)
            return True
