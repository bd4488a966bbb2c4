"""The ports of backthink: small Protocols that every I/O edge implements.

The core (context, prompts, footer, gate) never imports an adapter; a round
gets its ports through constructors, so tests pass fakes from
`backthink.testing` and the daemon passes the SQL stores and the openai client.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeAlias

from backthink.models import (
    MAIN_SESSION,
    Memory,
    MemoryKind,
    Message,
    Owner,
    OwnerActivity,
    Recalled,
    SessionView,
    StateReading,
)
from backthink.records import (
    Delivery,
    DeliveryStatus,
    ModelMessage,
    ModelReply,
    OutgoingMessage,
    RoundRecord,
)


class Clock(Protocol):
    """The only source of "now" for services. Always timezone-aware UTC."""

    def now(self) -> datetime:
        """Return the current instant as an aware UTC datetime."""
        ...


class MessageStore(Protocol):
    """Owners' sessions. Reading the most recent messages must not grow with history.

    A round reads through `session_view` before it thinks and `owner_activity`
    after; it writes only through the outbox. `add`, `add_many` and `recent`
    serve the command line and the checks.
    """

    async def add(self, message: Message) -> Message:
        """Store one message and return it with its id."""
        ...

    async def add_many(self, messages: Sequence[Message]) -> int:
        """Store all messages in one transaction (all or nothing); return how many."""
        ...

    async def recent(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> list[Message]:
        """Return the last `limit` messages of a session, oldest first.

        Messages are ordered by (created_at, id), so two messages stored with the
        same timestamp keep their insertion order.
        """
        ...

    async def session_view(
        self, owner_id: str, limit: int, *, session_id: str = MAIN_SESSION
    ) -> SessionView:
        """Return the last `limit` messages and the owner's last message time, in one read.

        The messages are those the model is shown: a write-back whose delivery
        failed is left out (it still counts in `owner_activity`).
        """
        ...

    async def owner_activity(
        self, owner_id: str, *, messages: int, pushes: int, session_id: str = MAIN_SESSION
    ) -> OwnerActivity:
        """Return the owner's newest `messages` channels and the newest `pushes`, in one read."""
        ...

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
        """Return a session's messages created in [start, end), oldest first (the page's day)."""
        ...

    async def by_ids(self, owner_id: str, ids: Collection[int]) -> list[Message]:
        """Return an owner's messages with these ids, oldest first; ids not there are left out."""
        ...


class OwnerStore(Protocol):
    """Owners: who the companions serve, with their per-owner settings."""

    async def list(self, *, enabled_only: bool = False) -> builtins.list[Owner]:
        """Return every owner (or the enabled ones), by id."""
        ...

    async def get(self, owner_id: str) -> Owner | None:
        """Return the owner with this id, or None."""
        ...

    async def put(self, owner: Owner, *, at: datetime) -> None:
        """Insert the owner, or replace what it says."""
        ...

    async def remove(self, owner_id: str) -> bool:
        """Delete the owner (its messages and rounds stay); False if there is none."""
        ...

    async def sync_config(self, owners: Sequence[Owner], *, at: datetime) -> None:
        """Make `owners` the owners of source `config`: write each, delete the others."""
        ...


@dataclass(frozen=True)
class EndpointKey:
    """A model endpoint and the model asked there: what one process learns of it holds for all."""

    base_url: str | None
    model: str


MarkKey: TypeAlias = str | EndpointKey
"""Whose mark: an owner, by id, or a model endpoint."""


class Marks(Protocol):
    """Named timestamps shared by every process on the database (StoreError when it fails).

    An owner's pause, a channel's cooldown and the last startup greeting are
    kept under the owner's id; an endpoint's refusals under its `EndpointKey`.
    """

    async def marked_at(self, key: MarkKey, name: str) -> datetime | None:
        """When the named mark of `key` was last set, or None."""
        ...

    async def mark(self, key: MarkKey, name: str, at: datetime) -> None:
        """Set the named mark of `key` to `at` (insert or replace); it survives restarts."""
        ...

    async def clear(self, key: MarkKey, name: str) -> None:
        """Remove the named mark of `key`; nothing happens when it is not set."""
        ...


class RoundStore(Protocol):
    """The audit log of rounds."""

    async def save(self, record: RoundRecord) -> None:
        """Store a finished round. Saving the same id twice is an error."""
        ...

    async def list(
        self, *, owner_id: str | None = None, trigger: str | None = None, limit: int = 20
    ) -> list[RoundRecord]:
        """Return rounds newest first, optionally for one owner and one trigger."""
        ...

    async def get(self, round_id: str) -> RoundRecord | None:
        """Return one round, or None."""
        ...

    async def started_between(
        self, owner_id: str, start: datetime, end: datetime, *, limit: int = 1000
    ) -> builtins.list[RoundRecord]:
        """Return an owner's rounds started in [start, end), oldest first (the page's day)."""
        ...

    async def last_asked(self, owner_id: str, since: datetime) -> RoundRecord | None:
        """The owner's newest round since `since` that called the model (it has a digest)."""
        ...


class MemoryStore(Protocol):
    """Owners' long-term memories (notes, profile facts, thoughts) and recall over them.

    Other programs may write memories into the same table; what `forget`
    removes is gone from every table and index.
    """

    async def add(self, memory: Memory) -> Memory:
        """Store one memory and return it with its id."""
        ...

    async def list(
        self, owner_id: str, *, kind: MemoryKind | None = None, limit: int = 20
    ) -> builtins.list[Memory]:
        """Return an owner's memories newest first, of one kind or of every kind."""
        ...

    async def latest_thoughts(self, owner_id: str, n: int) -> builtins.list[Memory]:
        """Return an owner's newest `n` thoughts, newest first."""
        ...

    async def get_many(self, owner_id: str, ids: Collection[int]) -> builtins.list[Memory]:
        """Return an owner's memories with these ids, newest first; ids not there are left out."""
        ...

    async def forget(self, owner_id: str, memory_id: int) -> bool:
        """Delete one memory of an owner, text and index entries; False if there is none."""
        ...

    async def search(self, owner_id: str, query: str, *, limit: int = 20) -> builtins.list[Memory]:
        """Return an owner's memories holding every word of `query` (any case), newest first."""
        ...

    async def recall(
        self,
        owner_id: str,
        window: Sequence[Message],
        *,
        limit: int,
        max_chars: int,
        before_message_id: int | None = None,
        exclude: Collection[int] = (),
    ) -> builtins.list[Recalled]:
        """Return at most `limit` memories and older main-session messages the window recalls.

        Best first, their texts within `max_chars` together. Messages at or
        after `before_message_id` (default: the window's first) are never
        recalled, and the window does not count in the terms' statistics.
        Memories whose ids are in `exclude` (the journal shows them already)
        are not recalled either. Weak matches recall nothing.
        """
        ...


class Outbox(Protocol):
    """Deliveries on their way out. The round id is the idempotency key of each."""

    async def commit(self, delivery: Delivery, writeback: Message) -> bool:
        """Store the delivery and write its message back into the main session, atomically.

        Returns False, writing nothing, when this delivery id is already stored.
        """
        ...

    async def get(self, delivery_id: str) -> Delivery | None:
        """Return one delivery, or None."""
        ...

    async def pending(self, *, limit: int = 100, owner_id: str | None = None) -> list[Delivery]:
        """Return deliveries not yet sent nor given up, the earliest due first."""
        ...

    async def reroute(self, delivery_id: str, channel: str, *, at: datetime) -> Delivery:
        """Move a failed delivery and its write-back message to another channel, pending again."""
        ...

    async def unrecorded(
        self, *, since: datetime, limit: int = 100, owner_id: str | None = None
    ) -> list[Delivery]:
        """Return deliveries created at or after `since` whose round has no record yet.

        Oldest first. A process that dies between a delivery's commit and its
        round's record leaves such a row; the next start records it.
        """
        ...

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
        """Record the result of an attempt; FAILED also marks the write-back undelivered."""
        ...


class StateProvider(Protocol):
    """Where the owner's current state (RoundState) comes from."""

    def read(self, at: datetime) -> StateReading:
        """Read the owner's state as seen at `at`; unknown, stale or broken is not an error."""
        ...


class ModelClient(Protocol):
    """One chat-completion round against a model endpoint."""

    @property
    def model_name(self) -> str:
        """The model name sent with every request."""
        ...

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """Run one model turn, offering `tools` (chat-completions `tools` entries) if any.

        With tools offered the reply may carry tool calls instead of text.

        Raises:
            ModelTimeoutError: the endpoint did not answer in time.
            ToolsRefusedError: tools were offered and the endpoint refused them.
            ModelError: any other failure, including a reply with no usable text.
        """
        ...

    async def probe(self) -> str:
        """Check that the endpoint answers; one short line saying what it said.

        Raises:
            ModelError: it does not answer, or not as an endpoint should.
        """
        ...


class Channel(Protocol):
    """One place outside the main session a message can reach the owner (a webhook, a chat app).

    The main session itself (the channel of type web) needs no sender: the
    write-back committed with the outbox row is its delivery.
    """

    name: str

    @property
    def connected(self) -> bool:
        """Whether the channel can deliver now; a disconnected channel is never chosen."""
        ...

    async def send(self, message: OutgoingMessage) -> None:
        """Deliver one message; the round id is its idempotency key.

        Raises:
            DeliveryError: the message was not delivered; `retryable` says whether
                trying again later may help.
        """
        ...


class RoundTurn(Protocol):
    """A round's hold on its owner, for as long as the round runs."""

    def overtaken(self) -> bool:
        """Whether the owner has a turn of their own under way, or began one since the hold.

        A round overtaken before its model call skips; one overtaken before
        its hand-over stays silent: the owner is talking.
        """
        ...


class Turns(Protocol):
    """The owners' live turns: one round at a time per owner, whatever process hosts it."""

    def round(self, owner_id: str) -> AbstractAsyncContextManager[RoundTurn | None]:
        """Hold the owner's round for the block; None inside when another round holds it.

        Raises:
            StoreError: the hold shared with other processes cannot be taken.
        """
        ...
