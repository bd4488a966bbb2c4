"""SqlSession: the main session as chat apps read and write it (the API, the relay, the CLI).

Reads walk `ix_message_recent` (or `ix_message_origin` for pushes) from a
position in session order, (created_at, id), so a page costs the same at any
history size. Each push carries the state of its delivery, read in the same
query. Writes are idempotent by the chat app's own message id.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from functools import cache
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Integer, and_, bindparam, insert, or_
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from backthink.models import MAIN_SESSION, DeliveryState, Message, SessionEntry
from backthink.store.columns import UTCDateTime
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.messages import message_values
from backthink.store.tables import DeliveryRow, MessageRow

_MESSAGE = TypeAdapter(Message)
_MESSAGES = TypeAdapter(list[Message])
_STATES: dict[str | None, DeliveryState] = {
    "sent": "delivered",
    "failed": "undelivered",
    "pending": "pending",
}
_INSERT = insert(MessageRow).returning(col(MessageRow.id))


def _entries(rows: Sequence[RowMapping]) -> list[SessionEntry]:
    """Rows of message columns plus the delivery's `status`, validated in one pass."""
    values = [dict(row) for row in rows]
    statuses = [v.pop("status") for v in values]
    out: list[SessionEntry] = []
    for message, status in zip(_MESSAGES.validate_python(values), statuses, strict=True):
        if message.origin != "proactive":
            out.append(SessionEntry(message))
            continue
        # A push whose outbox row is gone (or was never there) tells by its own flag.
        state = _STATES.get(status) or ("undelivered" if message.undelivered else "delivered")
        out.append(SessionEntry(message, state))
    return out


@cache
def _query(*, pushes_only: bool, after: bool) -> Any:
    """A page of entries, with bound parameters; built once per kind, so a call builds none.

    Parameters: `owner_id`, `session_id`, `limit`, and with `after` the
    position `after_at`, `after_id` to read on from (oldest first); without it
    the newest come first.
    """
    columns: list[Any] = [col(c) for c in MessageRow.__table__.columns]  # type: ignore[attr-defined]
    columns.append(col(DeliveryRow.status))
    query = (
        select(*columns)
        .outerjoin(DeliveryRow, col(DeliveryRow.id) == col(MessageRow.round_id))
        .where(
            col(MessageRow.owner_id) == bindparam("owner_id"),
            col(MessageRow.session_id) == bindparam("session_id"),
        )
    )
    if pushes_only:
        query = query.where(col(MessageRow.origin) == "proactive")
    created, ident = col(MessageRow.created_at), col(MessageRow.id)
    if after:
        at = bindparam("after_at", type_=UTCDateTime)
        query = query.where(
            or_(created > at, and_(created == at, ident > bindparam("after_id")))
        ).order_by(created, ident)
    else:
        query = query.order_by(created.desc(), ident.desc())
    return query.limit(bindparam("limit", type_=Integer))


@cache
def _position_query() -> Any:
    """When a message of an owner's session was said; parameters `id`, `owner_id`, `session_id`."""
    return select(col(MessageRow.created_at)).where(
        col(MessageRow.id) == bindparam("id"),
        col(MessageRow.owner_id) == bindparam("owner_id"),
        col(MessageRow.session_id) == bindparam("session_id"),
    )


class SqlSession:
    """The main session of each owner, read a page at a time and written idempotently."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def page(
        self, owner_id: str, *, after: int | None, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry] | None:
        """Messages after the message `after`, oldest first; without `after`, the newest `limit`.

        Returns None when `after` is not a message of this owner's session.
        """
        return await self._page(owner_id, after, limit, session_id, pushes_only=False)

    async def pushes(
        self, owner_id: str, *, after: int | None, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry] | None:
        """The companion's pushes after the message `after`, oldest first (None: the newest).

        Returns None when `after` is not a message of this owner's session.
        """
        return await self._page(owner_id, after, limit, session_id, pushes_only=True)

    async def _page(
        self, owner_id: str, after: int | None, limit: int, session_id: str, *, pushes_only: bool
    ) -> list[SessionEntry] | None:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        params: dict[str, Any] = {"owner_id": owner_id, "session_id": session_id, "limit": limit}
        newest = _query(pushes_only=pushes_only, after=False)
        later = _query(pushes_only=pushes_only, after=True)

        def read(conn: Connection) -> Sequence[RowMapping] | None:
            if after is None:
                return list(reversed(conn.execute(newest, params).mappings().all()))
            where = {"id": after, "owner_id": owner_id, "session_id": session_id}
            at = conn.execute(_position_query(), where).scalar_one_or_none()
            if at is None:
                return None
            params.update(after_at=at, after_id=after)
            return conn.execute(later, params).mappings().all()

        with store_errors("could not read messages"):
            rows = await self._db.read(read)
            return None if rows is None else _entries(rows)

    async def last_id(self, owner_id: str, *, session_id: str = MAIN_SESSION) -> int | None:
        """The id of the session's newest message, or None for an empty session."""
        query = (
            select(col(MessageRow.id))
            .where(col(MessageRow.owner_id) == owner_id, col(MessageRow.session_id) == session_id)
            .order_by(col(MessageRow.created_at).desc(), col(MessageRow.id).desc())
            .limit(1)
        )
        with store_errors("could not read messages"):
            return await self._db.read(lambda c: c.execute(query).scalar_one_or_none())

    async def append(self, messages: Sequence[Message]) -> list[Message]:
        """Store messages of one owner in one transaction; return each as stored, in order.

        A message whose `client_id` the owner's session holds already is not
        stored again: the stored one is returned in its place (also for a
        `client_id` given twice in one call).

        Raises:
            StoreError: the database failed; then none of the messages is stored.
        """
        if not messages:
            return []
        owner_id = messages[0].owner_id
        if any(m.owner_id != owner_id for m in messages):
            raise ValueError("append stores the messages of one owner at a time")

        def run(conn: Connection) -> list[Message]:
            wanted = sorted({m.client_id for m in messages if m.client_id is not None})
            known: dict[str, Message] = {}
            if wanted:
                found = select(MessageRow).where(
                    col(MessageRow.owner_id) == owner_id, col(MessageRow.client_id).in_(wanted)
                )
                for row in conn.execute(found).mappings():
                    known[row["client_id"]] = _MESSAGE.validate_python(dict(row))
            out: list[Message] = []
            for message in messages:
                if message.client_id is not None and message.client_id in known:
                    out.append(known[message.client_id])
                    continue
                new_id = conn.execute(_INSERT, message_values(message)).scalar_one()
                stored = message.model_copy(
                    update={"id": new_id, "created_at": message.created_at.astimezone(UTC)}
                )
                if message.client_id is not None:
                    known[message.client_id] = stored
                out.append(stored)
            return out

        with store_errors("could not store messages"):
            try:
                return await self._db.write(run)
            except IntegrityError:
                # Another writer stored one of these client ids in between; now it is known.
                return await self._db.write(run)

