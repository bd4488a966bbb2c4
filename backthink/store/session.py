"""SqlSession: the main session as chat apps read and write it (the API, the relay, the CLI).

Pages walk `ix_message_recent` from a position in session order,
(created_at, id), so a page costs the same at any history size; the push
stream reads pushes by id, the order they were stored in. Each push carries
the state of its delivery, read in the same query. Writes are idempotent by
the chat app's own message id.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC
from functools import cache
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Integer, and_, bindparam, false, func, insert, null, or_, update
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
def _query(*, pushes_only: bool, after: bool, lean: bool = False, every: bool = False) -> Any:
    """A page of entries, with bound parameters; built once per kind, so a call builds none.

    Parameters: `owner_id`, `session_id`, `limit`, and with `after` the
    position `after_at`, `after_id` to read on from (oldest first); without it
    the newest come first. A `lean` page leaves every image out; only a page
    of `every` message holds the superseded ones.
    """
    columns: list[Any] = [
        null().label("image") if lean and c.name == "image" else col(c)
        for c in MessageRow.__table__.columns  # type: ignore[attr-defined]
    ]
    columns.append(col(DeliveryRow.status))
    query = (
        select(*columns)
        .outerjoin(DeliveryRow, col(DeliveryRow.id) == col(MessageRow.round_id))
        .where(*_in_session(every=every))
    )
    if pushes_only:
        query = query.where(col(MessageRow.origin) == "proactive")
    return _ordered(query, after=after).limit(bindparam("limit", type_=Integer))


@cache
def _sizes_query(*, after: bool, every: bool = False) -> Any:
    """The characters of text and image of each message of a page, in the page's order."""
    size = func.length(col(MessageRow.text)) + func.coalesce(func.length(col(MessageRow.image)), 0)
    query = select(size.label("size")).where(*_in_session(every=every))
    return _ordered(query, after=after).limit(bindparam("limit", type_=Integer))


def _in_session(*, every: bool = True) -> list[Any]:
    """The conditions of one owner's session (parameters `owner_id`, `session_id`).

    Without `every`, the messages an edit in a front-end superseded are left out.
    """
    conditions = [
        col(MessageRow.owner_id) == bindparam("owner_id"),
        col(MessageRow.session_id) == bindparam("session_id"),
    ]
    if not every:
        conditions.append(col(MessageRow.superseded) == false())
    return conditions


def _ordered(query: Any, *, after: bool) -> Any:
    """Session order from the position (`after_at`, `after_id`) on, or newest first."""
    created, ident = col(MessageRow.created_at), col(MessageRow.id)
    if not after:
        return query.order_by(created.desc(), ident.desc())
    at = bindparam("after_at", type_=UTCDateTime)
    return query.where(
        or_(created > at, and_(created == at, ident > bindparam("after_id")))
    ).order_by(created, ident)


@cache
def _pushes_query() -> Any:
    """The owner's pushes with an id above `after_id`, by id (parameters as `_query`'s)."""
    columns: list[Any] = [col(c) for c in MessageRow.__table__.columns]  # type: ignore[attr-defined]
    columns.append(col(DeliveryRow.status))
    return (
        select(*columns)
        .outerjoin(DeliveryRow, col(DeliveryRow.id) == col(MessageRow.round_id))
        .where(
            *_in_session(),
            col(MessageRow.origin) == "proactive",
            col(MessageRow.id) > bindparam("after_id"),
        )
        .order_by(col(MessageRow.id))
        .limit(bindparam("limit", type_=Integer))
    )


@cache
def _position_query() -> Any:
    """When a message of an owner's session was said; parameters `id`, `owner_id`, `session_id`."""
    return select(col(MessageRow.created_at)).where(
        col(MessageRow.id) == bindparam("id"), *_in_session()
    )


def _fitting(sizes: Sequence[int | None], max_chars: int) -> int:
    """How many of a page's messages (in the page's order) fit `max_chars`; always one at least."""
    total = 0
    for count, size in enumerate(sizes):
        total += size or 0
        if total > max_chars and count > 0:
            return count
    return len(sizes)


class SqlSession:
    """The main session of each owner, read a page at a time and written idempotently."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def page(
        self,
        owner_id: str,
        *,
        after: int | None,
        limit: int,
        max_chars: int | None = None,
        session_id: str = MAIN_SESSION,
        every: bool = False,
    ) -> list[SessionEntry] | None:
        """Messages after the message `after`, oldest first; without `after`, the newest `limit`.

        With `max_chars`, the page stops early once its texts and images pass
        that many characters (a page holds one message at least): with
        `after`, the oldest that fit; without, the newest that fit. Their
        sizes are read first, so a page of large images is never loaded whole.
        Superseded messages are left out unless `every` is set.

        Returns None when `after` is not a message of this owner's session.
        """
        return await self._page(
            owner_id, after, limit, session_id, max_chars=max_chars, every=every
        )

    async def recent(
        self, owner_id: str, *, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry]:
        """The newest `limit` messages, oldest first, without images or superseded ones.

        What a relayed turn is matched against.
        """
        found = await self._page(owner_id, None, limit, session_id, lean=True)
        return found or []

    async def _page(
        self,
        owner_id: str,
        after: int | None,
        limit: int,
        session_id: str,
        *,
        max_chars: int | None = None,
        lean: bool = False,
        every: bool = False,
    ) -> list[SessionEntry] | None:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        params: dict[str, Any] = {"owner_id": owner_id, "session_id": session_id, "limit": limit}
        rows_query = _query(pushes_only=False, after=after is not None, lean=lean, every=every)
        sizes_query = _sizes_query(after=after is not None, every=every)

        def read(conn: Connection) -> Sequence[RowMapping] | None:
            if after is not None:
                where = {"id": after, "owner_id": owner_id, "session_id": session_id}
                at = conn.execute(_position_query(), where).scalar_one_or_none()
                if at is None:
                    return None
                params.update(after_at=at, after_id=after)
            if max_chars is not None:
                sizes = conn.execute(sizes_query, params).scalars().all()
                params["limit"] = _fitting(sizes, max_chars)
            rows = conn.execute(rows_query, params).mappings().all()
            return rows if after is not None else list(reversed(rows))

        with store_errors("could not read messages"):
            rows = await self._db.read(read)
            return None if rows is None else _entries(rows)

    async def pushes(
        self, owner_id: str, *, after: int, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry]:
        """The companion's pushes with an id above `after`, by id: the order a stream sends them.

        Ids, not times, order them: a push is stored as it is made, while a
        chat app may date its own messages (a little ahead, even), and the
        stream must never step over a push for a message's date.
        """
        params = {"owner_id": owner_id, "session_id": session_id, "after_id": after, "limit": limit}
        with store_errors("could not read messages"):
            rows = await self._db.read(
                lambda c: c.execute(_pushes_query(), params).mappings().all()
            )
            return _entries(rows)

    async def last_push_id(self, owner_id: str, *, session_id: str = MAIN_SESSION) -> int | None:
        """The highest id of the owner's pushes, or None when the companion pushed nothing yet."""
        query = select(func.max(col(MessageRow.id))).where(
            col(MessageRow.owner_id) == owner_id,
            col(MessageRow.session_id) == session_id,
            col(MessageRow.origin) == "proactive",
        )
        with store_errors("could not read messages"):
            found: int | None = await self._db.read(lambda c: c.execute(query).scalar_one())
            return found

    async def holds(
        self, owner_id: str, message_id: int, *, session_id: str = MAIN_SESSION
    ) -> bool:
        """Whether `message_id` is a message of the owner's session."""
        where = {"id": message_id, "owner_id": owner_id, "session_id": session_id}
        with store_errors("could not read messages"):
            at = await self._db.read(
                lambda c: c.execute(_position_query(), where).scalar_one_or_none()
            )
            return at is not None

    async def revise(self, owner_id: str, message_id: int, text: str) -> bool:
        """Put `text` in place of a message's own (a regenerated reply); False when it is gone.

        The message keeps its id and its time, so its place in the session.

        Raises:
            StoreError: the database failed.
        """
        query = (
            update(MessageRow)
            .where(col(MessageRow.id) == message_id, col(MessageRow.owner_id) == owner_id)
            .values(text=text)
        )
        with store_errors("could not store messages"):
            changed: int = await self._db.write(lambda c: c.execute(query).rowcount)
            return changed > 0

    async def supersede(self, owner_id: str, message_ids: Collection[int]) -> int:
        """Mark messages of the owner superseded (an edit in a front-end left them behind).

        They stay in the store; only `page(every=True)` reads them from then on.
        Returns how many were marked.

        Raises:
            StoreError: the database failed.
        """
        wanted = sorted(set(message_ids))
        if not wanted:
            return 0
        query = (
            update(MessageRow)
            .where(col(MessageRow.owner_id) == owner_id, col(MessageRow.id).in_(wanted))
            .values(superseded=True)
        )
        with store_errors("could not store messages"):
            changed: int = await self._db.write(lambda c: c.execute(query).rowcount)
            return changed

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
