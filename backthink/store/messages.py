"""SqlMessageStore: owners' sessions in the `message` table.

Every read a round, recall or the gate makes leaves out the messages an edit
in a front-end superseded (`message.superseded`); only the page's own
reads by time and by id show them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Integer, bindparam, false, insert
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql import Executable
from sqlmodel import col, select
from sqlmodel.sql.expression import Select, SelectOfScalar

from backthink.models import MAIN_SESSION, Message, OwnerActivity, PastPush, SessionView
from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import MessageRow

_NEWEST_FIRST = (col(MessageRow.created_at).desc(), col(MessageRow.id).desc())


@cache
def _newest() -> SelectOfScalar[MessageRow]:
    """The newest messages of a session, newest first, with bound parameters.

    Built once and executed with a parameter dict, so a round pays for no
    statement construction; the parameters are `owner_id`, `session_id` and `limit`.
    """
    query = select(MessageRow).where(
        col(MessageRow.owner_id) == bindparam("owner_id"),
        col(MessageRow.session_id) == bindparam("session_id"),
        # Turns an edit in a front-end left behind are kept, never read by a round.
        col(MessageRow.superseded) == false(),
    )
    return query.order_by(*_NEWEST_FIRST).limit(bindparam("limit", type_=Integer))


@cache
def _newest_shown() -> SelectOfScalar[MessageRow]:
    """Like `_newest`, without write-backs whose delivery failed: what the model is shown."""
    return _newest().where(col(MessageRow.undelivered) == false())


@cache
def _newest_pushes() -> Select[datetime, str, str | None]:
    """(created_at, text, channel) of the newest proactive messages, with bound parameters."""
    query = select(col(MessageRow.created_at), col(MessageRow.text), col(MessageRow.channel)).where(
        col(MessageRow.owner_id) == bindparam("owner_id"),
        col(MessageRow.session_id) == bindparam("session_id"),
        col(MessageRow.origin) == "proactive",
    )
    return query.order_by(*_NEWEST_FIRST).limit(bindparam("limit", type_=Integer))


@cache
def _newest_owner_channels() -> Select[str | None, datetime]:
    """(channel, created_at) of the owner's newest messages of a session, bound parameters."""
    query = select(col(MessageRow.channel), col(MessageRow.created_at)).where(
        col(MessageRow.owner_id) == bindparam("owner_id"),
        col(MessageRow.session_id) == bindparam("session_id"),
        col(MessageRow.role) == "user",
        col(MessageRow.superseded) == false(),
    )
    return query.order_by(*_NEWEST_FIRST).limit(bindparam("limit", type_=Integer))


def _params(owner_id: str, limit: int, session_id: str) -> dict[str, Any]:
    return {"owner_id": owner_id, "session_id": session_id, "limit": limit}


def _check_limit(limit: int) -> None:
    # SQLite reads a negative LIMIT as "no limit"; that would read the whole history.
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")


def message_values(message: Message) -> dict[str, Any]:
    """Column values of a message; a missing id is left to the database."""
    # dict(model) reads the fields without serializing them, so even a model
    # built without validation reaches the database's own constraints.
    values = dict(message)
    if values["id"] is None:
        del values["id"]
    return values


_MESSAGES = TypeAdapter(list[Message])


def _to_messages(rows: Iterable[RowMapping]) -> list[Message]:
    """Validate rows as messages in one pass: the chat app writes them, not backthink."""
    return _MESSAGES.validate_python([dict(row) for row in rows])


class SqlMessageStore:
    """The MessageStore on SQL (SQLite or PostgreSQL).

    Every read of the newest messages is one query on `ix_message_recent`, so
    its cost does not grow with the length of the history. Times come back as
    aware UTC datetimes whatever zone they were stored in.
    """

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def add(self, message: Message) -> Message:
        """Store one message and return it with its id and its time in UTC.

        A message that already carries an id is stored under that id.

        Raises:
            StoreError: the database failed, or the id is already taken.
        """
        statement = insert(MessageRow).returning(col(MessageRow.id))
        values = message_values(message)
        with store_errors("could not store message"):
            new_id = await self._db.write(lambda c: c.execute(statement, values).scalar_one())
        return message.model_copy(
            update={"id": new_id, "created_at": message.created_at.astimezone(UTC)}
        )

    async def add_many(self, messages: Sequence[Message]) -> int:
        """Store all messages in one transaction (all or nothing); return how many.

        Raises:
            StoreError: the database failed or a message broke a constraint;
                then none of the messages is stored.
        """
        if not messages:
            return 0
        rows = [message_values(message) for message in messages]
        # An executemany compiles one statement from the first row's keys, so rows
        # that bring their own id are inserted by a statement of their own.
        batches = [
            batch
            for batch in ([r for r in rows if "id" not in r], [r for r in rows if "id" in r])
            if batch
        ]

        def insert_all(conn: Connection) -> None:
            for batch in batches:
                conn.execute(insert(MessageRow), batch)

        with store_errors("could not store messages"):
            await self._db.write(insert_all)
        return len(messages)

    async def _rows(self, query: Executable, params: dict[str, Any]) -> list[Message]:
        with store_errors("could not read messages"):
            rows = await self._db.read(lambda c: c.execute(query, params).mappings().all())
            return _to_messages(rows)

    async def recent(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> list[Message]:
        """Return the last `limit` messages of a session, oldest first.

        Messages are ordered by (created_at, id), so two messages stored with the
        same timestamp keep their insertion order.
        """
        _check_limit(limit)
        newest_first = await self._rows(_newest(), _params(owner_id, limit, session_id))
        newest_first.reverse()
        return newest_first

    async def session_view(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> SessionView:
        """Return the last `limit` messages (oldest first) and when the owner last wrote.

        One read. The owner's last message is usually among the recent ones; only
        when it is not does a second query, on `ix_message_role`, look further.
        """
        _check_limit(limit)
        recent_params = _params(owner_id, limit, session_id)
        owner_params = _params(owner_id, 1, session_id)

        def read(conn: Connection) -> tuple[Sequence[RowMapping], datetime | None]:
            rows = conn.execute(_newest_shown(), recent_params).mappings().all()
            owner_at = next((row["created_at"] for row in rows if row["role"] == "user"), None)
            if owner_at is None:
                found = conn.execute(_newest_owner_channels(), owner_params).first()
                owner_at = found[1] if found else None
            return rows, owner_at

        with store_errors("could not read messages"):
            rows, owner_at = await self._db.read(read)
            recent = _to_messages(reversed(rows))
        return SessionView(recent=recent, last_owner_message_at=owner_at)

    async def owner_activity(
        self, owner_id: str, *, messages: int, pushes: int, session_id: str = MAIN_SESSION
    ) -> OwnerActivity:
        """Return the owner's newest `messages` (channel, time) and the newest `pushes`.

        Both newest first, in one read.
        """
        _check_limit(messages)
        _check_limit(pushes)
        owner_params = _params(owner_id, messages, session_id)
        push_params = _params(owner_id, pushes, session_id)

        def read(conn: Connection) -> OwnerActivity:
            owner = conn.execute(_newest_owner_channels(), owner_params).all()
            found = conn.execute(_newest_pushes(), push_params).all()
            return OwnerActivity(
                owner_messages=[(channel, at) for channel, at in owner],
                # Only what the gate compares: no full message is built per push.
                pushes=[PastPush(at, text, channel) for at, text, channel in found],
            )

        with store_errors("could not read messages"):
            return await self._db.read(read)

    async def between(
        self,
        owner_id: str,
        start: datetime,
        end: datetime,
        *,
        role: str | None = None,
        limit: int = 1000,
        session_id: str = MAIN_SESSION,
    ) -> list[Message]:
        """Return a session's messages created in [start, end), oldest first, at most `limit`."""
        _check_limit(limit)
        query = select(MessageRow).where(
            col(MessageRow.owner_id) == owner_id,
            col(MessageRow.session_id) == session_id,
            col(MessageRow.created_at) >= start.astimezone(UTC),
            col(MessageRow.created_at) < end.astimezone(UTC),
        )
        if role is not None:
            query = query.where(col(MessageRow.role) == role)
        query = query.order_by(col(MessageRow.created_at), col(MessageRow.id)).limit(limit)
        with store_errors("could not read messages"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return _to_messages(rows)

    async def by_ids(self, owner_id: str, ids: Collection[int]) -> list[Message]:
        """Return an owner's messages with these ids, oldest first; ids not there are left out."""
        wanted = sorted(set(ids))
        if not wanted:
            return []
        query = (
            select(MessageRow)
            .where(col(MessageRow.owner_id) == owner_id, col(MessageRow.id).in_(wanted))
            .order_by(col(MessageRow.created_at), col(MessageRow.id))
        )
        with store_errors("could not read messages"):
            rows = await self._db.read(lambda c: c.execute(query).mappings().all())
            return _to_messages(rows)
