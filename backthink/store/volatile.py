"""In-memory stores with the same behaviour as the SQL stores, for tests and benchmarks."""

from __future__ import annotations

import builtins
from bisect import insort
from collections.abc import Collection, Iterator, Sequence
from datetime import UTC, datetime
from itertools import islice

from pydantic import ValidationError

from backthink.errors import StoreError
from backthink.models import (
    MAIN_SESSION,
    Message,
    Owner,
    OwnerActivity,
    PastPush,
    SessionView,
)
from backthink.records import Delivery, DeliveryStatus, RoundRecord
from backthink.store.failures import describe


def check_limit(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")


def _validated(message: Message, position: int) -> Message:
    """Re-validate like the database's constraints would, and normalise the time to UTC."""
    try:
        # A model built with model_construct skipped validation; the SQL store
        # meets the same problem as a NOT NULL or CHECK failure.
        checked = Message.model_validate(dict(message))
    except ValidationError as exc:
        raise StoreError(f"could not store messages: message {position}: {describe(exc)}") from None
    return checked.model_copy(update={"created_at": checked.created_at.astimezone(UTC)})


def _order(message: Message) -> tuple[datetime, int]:
    return (message.created_at, message.id or 0)


class VolatileMessageStore:
    """A MessageStore in per-session lists kept in (created_at, id) order.

    Ids count up from the highest id stored so far, as SQLite's rowids do, so
    reading the newest messages is a slice from the end at any history size.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._sessions: dict[tuple[str, str], builtins.list[Message]] = {}
        self._ids: set[int] = set()
        self._max_id = 0

    async def add(self, message: Message) -> Message:
        """Store one message and return it with its id and its time in UTC."""
        return self._store([message])[0]

    async def add_many(self, messages: Sequence[Message]) -> int:
        """Store all messages, or none of them if one is invalid; return how many."""
        return len(self._store(messages))

    def _store(self, messages: Sequence[Message]) -> builtins.list[Message]:
        # Everything is checked and numbered before anything is kept, so a bad
        # batch leaves the store as it was, like a rolled-back transaction.
        taken: set[int] = set()
        max_id = self._max_id
        ready: builtins.list[Message] = []
        for position, message in enumerate(messages, start=1):
            checked = _validated(message, position)
            new_id = checked.id if checked.id is not None else max_id + 1
            if new_id in self._ids or new_id in taken:
                raise StoreError(f"could not store messages: message id {new_id} is taken")
            taken.add(new_id)
            max_id = max(max_id, new_id)
            ready.append(checked.model_copy(update={"id": new_id}))
        for message in ready:
            session = self._sessions.setdefault((message.owner_id, message.session_id), [])
            insort(session, message, key=_order)
        self._ids |= taken
        self._max_id = max_id
        return ready

    def scan(self) -> Iterator[Message]:
        """Every stored message, of every owner and session, each session's in order."""
        for session in self._sessions.values():
            yield from session

    def _newest_first(self, owner_id: str, session_id: str, role: str | None) -> Iterator[Message]:
        """A session's messages newest first, superseded ones left out (as rounds read it)."""
        for message in reversed(self._sessions.get((owner_id, session_id), [])):
            if not message.superseded and (role is None or message.role == role):
                yield message

    async def recent(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> builtins.list[Message]:
        """Return the last `limit` messages of a session, oldest first, by (created_at, id)."""
        check_limit(limit)
        found = list(islice(self._newest_first(owner_id, session_id, None), limit))
        found.reverse()
        return found

    async def session_view(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> SessionView:
        """Return the last `limit` messages shown to the model, and when the owner last wrote.

        Oldest first; a write-back whose delivery failed is not shown.
        """
        check_limit(limit)
        shown = (m for m in self._newest_first(owner_id, session_id, None) if not m.undelivered)
        recent = list(islice(shown, limit))
        recent.reverse()
        owner = next(self._newest_first(owner_id, session_id, "user"), None)
        return SessionView(recent=recent, last_owner_message_at=owner.created_at if owner else None)

    async def between(
        self,
        owner_id: str,
        start: datetime,
        end: datetime,
        *,
        role: str | None = None,
        limit: int = 1000,
        session_id: str = MAIN_SESSION,
    ) -> builtins.list[Message]:
        """Return a session's messages created in [start, end), oldest first, at most `limit`."""
        check_limit(limit)
        found = (
            m
            for m in self._sessions.get((owner_id, session_id), [])
            if start <= m.created_at < end and (role is None or m.role == role)
        )
        return list(islice(found, limit))

    async def by_ids(self, owner_id: str, ids: Collection[int]) -> builtins.list[Message]:
        """Return an owner's messages with these ids, oldest first."""
        wanted = set(ids)
        found = [
            m
            for (owner, _), session in self._sessions.items()
            if owner == owner_id
            for m in session
            if m.id in wanted
        ]
        return sorted(found, key=_order)

    async def supersede(self, owner_id: str, message_ids: Collection[int]) -> int:
        """Mark messages superseded, as `SqlSession.supersede` does; how many were marked."""
        wanted, marked = set(message_ids), 0
        for (owner, _), session in self._sessions.items():
            for i, message in enumerate(session):
                if owner == owner_id and message.id in wanted:
                    session[i] = message.model_copy(update={"superseded": True})
                    marked += 1
        return marked

    def _rewrite_writeback(self, round_id: str, **fields: object) -> None:
        """Change fields of a round's write-back message, as the SQL outbox does."""
        for session in self._sessions.values():
            for i, message in enumerate(session):
                if message.round_id == round_id:
                    session[i] = message.model_copy(update=fields)

    async def owner_activity(
        self, owner_id: str, *, messages: int, pushes: int, session_id: str = MAIN_SESSION
    ) -> OwnerActivity:
        """Return the owner's newest `messages` (channel, time) and the newest `pushes`."""
        check_limit(messages)
        check_limit(pushes)
        owner = islice(self._newest_first(owner_id, session_id, "user"), messages)
        proactive = (
            m for m in self._newest_first(owner_id, session_id, None) if m.origin == "proactive"
        )
        return OwnerActivity(
            owner_messages=[(m.channel, m.created_at) for m in owner],
            pushes=[PastPush(m.created_at, m.text, m.channel) for m in islice(proactive, pushes)],
        )


class VolatileRoundStore:
    """A RoundStore in a dict keyed by round id."""

    def __init__(self) -> None:
        """Start empty."""
        self._rounds: dict[str, RoundRecord] = {}

    async def save(self, record: RoundRecord) -> None:
        """Store a finished round; a second save of the same id is a StoreError."""
        if record.id in self._rounds:
            raise StoreError(f"could not save round {record.id!r}: the id is already stored")
        self._rounds[record.id] = record.model_copy(
            update={
                "started_at": record.started_at.astimezone(UTC),
                "finished_at": record.finished_at.astimezone(UTC),
            }
        )

    async def get(self, round_id: str) -> RoundRecord | None:
        """Return the round with this id, or None if there is none."""
        return self._rounds.get(round_id)

    async def list(
        self, *, owner_id: str | None = None, trigger: str | None = None, limit: int = 20
    ) -> builtins.list[RoundRecord]:
        """Return rounds newest first (by start time, then id), optionally for one owner/trigger."""
        check_limit(limit)
        found = [
            r
            for r in self._rounds.values()
            if (owner_id is None or r.owner_id == owner_id)
            and (trigger is None or r.trigger == trigger)
        ]
        found.sort(key=lambda record: (record.started_at, record.id), reverse=True)
        return found[:limit]

    async def started_between(
        self, owner_id: str, start: datetime, end: datetime, *, limit: int = 1000
    ) -> builtins.list[RoundRecord]:
        """Return an owner's rounds started in [start, end), oldest first, at most `limit`."""
        check_limit(limit)
        found = [
            r
            for r in self._rounds.values()
            if r.owner_id == owner_id and start <= r.started_at < end
        ]
        found.sort(key=lambda record: (record.started_at, record.id))
        return found[:limit]

    async def last_asked(self, owner_id: str, since: datetime) -> RoundRecord | None:
        """The owner's newest round started at or after `since` that called the model, or None."""
        found = [
            r
            for r in self._rounds.values()
            if r.owner_id == owner_id and r.started_at >= since and r.digest is not None
        ]
        return max(found, key=lambda record: (record.started_at, record.id), default=None)


class VolatileOutbox:
    """An outbox in a dict, writing back into a VolatileMessageStore atomically."""

    def __init__(self, messages: VolatileMessageStore, rounds: VolatileRoundStore) -> None:
        """Write back into `messages`; records of completed deliveries go to `rounds`."""
        self._messages = messages
        self._rounds = rounds
        self._rows: dict[str, Delivery] = {}

    async def commit(self, delivery: Delivery, writeback: Message) -> bool:
        """Store the row and the write-back message together; False if the id exists."""
        if delivery.id in self._rows:
            return False
        # _store validates before keeping anything, so a bad message keeps no row either.
        self._messages._store([writeback])
        self._rows[delivery.id] = delivery
        return True

    async def get(self, delivery_id: str) -> Delivery | None:
        """Return one delivery, or None."""
        return self._rows.get(delivery_id)

    async def pending(
        self, *, limit: int = 100, owner_id: str | None = None
    ) -> builtins.list[Delivery]:
        """Return pending deliveries (of one owner, or all), the earliest due first."""
        rows = [
            d
            for d in self._rows.values()
            if d.status is DeliveryStatus.PENDING and owner_id in (None, d.owner_id)
        ]
        rows.sort(key=lambda d: (d.next_attempt_at or d.created_at, d.created_at))
        return rows[:limit]

    async def reroute(self, delivery_id: str, channel: str, *, at: datetime) -> Delivery:
        """Move a failed delivery and its write-back to another channel, pending again."""
        row = self._rows[delivery_id].model_copy(
            update={
                "channel": channel,
                "status": DeliveryStatus.PENDING,
                "next_attempt_at": at,
                "updated_at": at.astimezone(UTC),
            }
        )
        self._rows[delivery_id] = row
        self._messages._rewrite_writeback(delivery_id, channel=channel, undelivered=False)
        return row

    async def unrecorded(
        self, *, since: datetime, limit: int = 100, owner_id: str | None = None
    ) -> builtins.list[Delivery]:
        """Return deliveries created at or after `since` whose round has no record, oldest first."""
        rows = [
            d
            for d in self._rows.values()
            if d.created_at >= since
            and owner_id in (None, d.owner_id)
            and await self._rounds.get(d.id) is None
        ]
        rows.sort(key=lambda d: d.created_at)
        return rows[:limit]

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
        """Record the result of a delivery attempt; a failure marks the write-back undelivered."""
        row = self._rows[delivery_id]
        if status is DeliveryStatus.FAILED:
            self._messages._rewrite_writeback(delivery_id, undelivered=True)
        self._rows[delivery_id] = row.model_copy(
            update={
                "status": status,
                "attempts": attempts,
                "next_attempt_at": next_attempt_at,
                "last_error": last_error,
                "updated_at": at.astimezone(UTC),
            }
        )


class VolatileOwnerStore:
    """An OwnerStore in a dict keyed by owner id."""

    def __init__(self) -> None:
        """Start with no owners."""
        self._rows: dict[str, Owner] = {}

    async def list(self, *, enabled_only: bool = False) -> builtins.list[Owner]:
        """Return every owner (or the enabled ones), by id."""
        return [o for _, o in sorted(self._rows.items()) if o.enabled or not enabled_only]

    async def get(self, owner_id: str) -> Owner | None:
        """Return the owner with this id, or None."""
        return self._rows.get(owner_id)

    async def put(self, owner: Owner, *, at: datetime) -> None:
        """Insert the owner, or replace what it says."""
        self._rows[owner.id] = owner

    async def remove(self, owner_id: str) -> bool:
        """Delete the owner; False if there is none."""
        return self._rows.pop(owner_id, None) is not None

    async def sync_config(self, owners: Sequence[Owner], *, at: datetime) -> None:
        """Make `owners` the owners of source `config`: write each, delete the others."""
        named = {o.id for o in owners}
        for owner_id in [k for k, o in self._rows.items() if o.source == "config"]:
            if owner_id not in named:
                del self._rows[owner_id]
        for owner in owners:
            self._rows[owner.id] = owner
