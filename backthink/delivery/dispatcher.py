"""Delivery: from a gated push to a message in the owner's hands, through one channel.

A round hands over its decision and chosen channel (`Handoff`) and gets back
one `DeliveryResult`; everything between lives here. The outbox row and the
write-back of the message into the main session are committed first, in one
transaction, and the message is sent second, so a crash in between loses
nothing: at start the daemon resumes every pending row. Each attempt carries
the round id as its idempotency key, so a receiver that saw the first attempt
of a resumed delivery can drop the second.

The main session's own channel (the configured channel of type web) has no
sender: the write-back is its delivery, so its row is committed as sent. With
the API on, that channel is connected only while the owner's audience is
there to see it (`backthink.delivery.audience`), and every push, on any
channel, is announced to the owner's open event streams.

A channel that failed every try is down for a cooldown. That is kept in the
database (a mark per owner and channel, the end of the cooldown), so the
daemon, a one-shot `think`, `status` and the workers all see it: a round
reads it before it chooses a channel (`refresh`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from backthink.config import PersonaSettings
from backthink.delivery.audience import OwnerAudience
from backthink.errors import DeliveryError, StoreError
from backthink.models import Decision, Message
from backthink.ports import Channel, Clock, Marks, Outbox
from backthink.records import Delivery, DeliveryStatus, OutgoingMessage

log = structlog.get_logger(__name__)

DEFAULT_BACKOFF_S = (1.0, 4.0)  # seconds to wait before the 2nd and 3rd attempt
DEFAULT_COOLDOWN = timedelta(minutes=10)  # a failed channel is skipped this long
# How far back the start-up search looks for deliveries whose round went unrecorded.
# Only a process that died between two writes of one round leaves such a row.
UNRECORDED_LOOKBACK = timedelta(days=1)

Sleep = Callable[[float], Awaitable[None]]

CHANNEL_DOWN = "channel_down:"
"""The mark of a channel that failed every try: `channel_down:NAME`, set to the cooldown's end."""


@dataclass(frozen=True)
class Handoff:
    """What a round passes on once the gate has chosen a channel (and the next candidates)."""

    round_id: str
    owner_id: str
    trigger: str
    decision: Decision
    channel: str
    at: datetime
    fallbacks: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeliveryResult:
    """How a delivery ended."""

    sent: bool
    attempts: int
    error: str | None = None
    channel: str | None = None
    """The channel that delivered, or that was tried last."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resumed:
    """A delivery finished (or found finished) at start, whose round still needs a record."""

    delivery: Delivery
    result: DeliveryResult


class Dispatcher:
    """Commits, sends and resumes deliveries; the only part that knows the channels."""

    def __init__(
        self,
        outbox: Outbox,
        senders: Mapping[str, Channel],
        clock: Clock,
        *,
        persona: PersonaSettings,
        order: Sequence[str],
        session_channel: str | None,
        cooldown: timedelta = DEFAULT_COOLDOWN,
        backoff_s: Sequence[float] = DEFAULT_BACKOFF_S,
        sleep: Sleep | None = None,
        audience: OwnerAudience | None = None,
        marks: Marks | None = None,
        owner_id: str | None = None,
    ) -> None:
        """Create the dispatcher.

        Args:
            outbox: where deliveries and their write-backs are committed.
            senders: the channels that send (every configured channel but the session's).
            clock: the source of "now" for attempt times.
            persona: who speaks: the write-back's speaker and the message's sender.
            order: every configured channel name, in configuration order.
            session_channel: the main session's own channel, if one is configured.
            cooldown: how long a channel that failed a delivery counts as disconnected.
            backoff_s: waits before the second, third, ... attempt.
            sleep: how to wait (tests pass one that returns at once).
            audience: the owner's API clients (None without the API): the session
                channel is connected only while they are there, and they hear of
                every push.
            marks: where the channels' cooldowns are shared with other processes.
            owner_id: whose channels these are (the marks are per owner).
        """
        self._outbox = outbox
        self._senders = senders
        self._clock = clock
        self._persona = persona
        self._order = tuple(order)
        self._session = session_channel
        self._cooldown = cooldown
        # A circuit breaker per channel: the end of its cooldown after a failed delivery.
        self._down_until: dict[str, datetime] = {}
        self._backoff = tuple(backoff_s)
        self._sleep = sleep or asyncio.sleep
        self._audience = audience
        self._marks = marks if owner_id is not None else None
        self._owner = owner_id or ""

    @property
    def session_channel(self) -> str | None:
        """The main session's own channel (type web), if one is configured."""
        return self._session

    def connected(self) -> list[str]:
        """Names of the channels that can deliver now, in configuration order."""
        now = self._clock.now()
        watched = self._audience is None or self._audience.present(now)
        return [
            name
            for name in self._order
            if (name == self._session and watched)
            or (
                name in self._senders
                and self._senders[name].connected
                and self._down_until.get(name, now) <= now
            )
        ]

    async def refresh(self) -> None:
        """Take up the channels' cooldowns as every process left them in the database.

        A read that fails leaves what this process knows as it was.
        """
        if self._marks is None:
            return
        now = self._clock.now()
        try:
            for name in self._senders:
                until = await self._marks.marked_at(self._owner, CHANNEL_DOWN + name)
                if until is not None and until > now:
                    self._down_until[name] = until
                else:
                    self._down_until.pop(name, None)
        except StoreError as exc:
            log.warning("delivery.health_unread", error=str(exc))

    async def _share(self, name: str, until: datetime) -> None:
        """Write a channel's cooldown (its end; now when it is up again) for every process."""
        if self._marks is None:
            return
        try:
            await self._marks.mark(self._owner, CHANNEL_DOWN + name, until)
        except StoreError as exc:
            log.warning("delivery.health_unsaved", channel=name, error=str(exc))

    def health(self) -> dict[str, str]:
        """Every configured channel with "ok" when it can deliver now, else "down"."""
        up = set(self.connected())
        return {name: "ok" if name in up else "down" for name in self._order}

    async def hand_over(self, handoff: Handoff) -> DeliveryResult:
        """Commit the delivery with its write-back, then send it; one result, whatever happens.

        Raises:
            StoreError: the commit failed; nothing was written and nothing sent.
        """
        try:
            return await self._hand_over(handoff)
        finally:
            if self._audience is not None:
                # The streams read the session themselves: waking them for nothing is harmless.
                self._audience.announce()

    async def _hand_over(self, handoff: Handoff) -> DeliveryResult:
        at = handoff.at
        message = OutgoingMessage(
            round_id=handoff.round_id,
            owner_id=handoff.owner_id,
            persona_id=self._persona.id,
            persona_name=self._persona.name,
            text=handoff.decision.body,
            urgency=handoff.decision.urgency,
            created_at=at,
        )
        writeback = Message(
            owner_id=handoff.owner_id,
            role="assistant",
            text=handoff.decision.body,
            speaker=self._persona.id,
            channel=handoff.channel,
            origin="proactive",
            created_at=at,
            round_id=handoff.round_id,
        )
        # The one rule for the main session: its write-back is the delivery.
        in_session = handoff.channel == self._session
        delivery = Delivery(
            id=handoff.round_id,
            owner_id=handoff.owner_id,
            channel=handoff.channel,
            message=message,
            status=DeliveryStatus.SENT if in_session else DeliveryStatus.PENDING,
            attempts=1 if in_session else 0,
            next_attempt_at=None if in_session else at,
            created_at=at,
            updated_at=at,
            trigger=handoff.trigger,
        )
        if not await self._outbox.commit(delivery, writeback):
            # A round id is fresh per round; seeing it again means this is a replay.
            log.debug("delivery.already_committed", round_id=handoff.round_id)
            stored = await self._outbox.get(handoff.round_id)
            sent = stored is not None and stored.status is DeliveryStatus.SENT
            return DeliveryResult(sent=sent, attempts=stored.attempts if stored else 0)
        if in_session:
            log.info("delivery.sent", round_id=handoff.round_id, channel=handoff.channel, attempt=1)
            return DeliveryResult(sent=True, attempts=1, channel=handoff.channel)
        first = await self.send(delivery)
        if first.sent:
            return first
        # The chosen channel failed every try: the next connected candidate gets one
        # try. Still one channel delivers; a failure there leaves the push undelivered.
        fallback = next(
            (c for c in handoff.fallbacks if c != delivery.channel and c in self.connected()), None
        )
        if fallback is None:
            return first
        moved = await self._outbox.reroute(delivery.id, fallback, at=self._clock.now())
        note = f"{delivery.channel} failed; tried {fallback} instead"
        log.info(
            "delivery.rerouted", round_id=delivery.id, channel=fallback, failed=delivery.channel
        )
        if fallback == self._session:
            await self._mark(moved, DeliveryStatus.SENT, moved.attempts + 1, None)
            return DeliveryResult(
                sent=True, attempts=moved.attempts + 1, channel=fallback, notes=(note,)
            )
        second = await self.send(moved, retries=False)
        return DeliveryResult(
            sent=second.sent,
            attempts=second.attempts,
            error=None if second.sent else f"{first.error}; then {second.error}",
            channel=fallback,
            notes=(note,),
        )

    async def send(self, delivery: Delivery, *, retries: bool = True) -> DeliveryResult:
        """Try to deliver until sent, refused for good, or out of attempts; record each try.

        With `retries` off, one attempt only. A channel that fails its last
        attempt counts as disconnected for the cooldown; one that delivers is
        connected again at once.
        """
        attempts = delivery.attempts
        name = delivery.channel
        channel = self._senders.get(name)
        for wait in (*(self._backoff if retries else ()), None):
            attempts += 1
            try:
                if channel is None:
                    raise DeliveryError(
                        delivery.channel, "the channel is no longer configured", retryable=False
                    )
                await channel.send(delivery.message)
            except DeliveryError as exc:
                give_up = wait is None or not exc.retryable
                await self._mark(
                    delivery,
                    DeliveryStatus.FAILED if give_up else DeliveryStatus.PENDING,
                    attempts,
                    exc.detail,
                    retry_in=None if give_up else wait,
                )
                log.warning(
                    "delivery.failed" if give_up else "delivery.retrying",
                    round_id=delivery.id,
                    channel=delivery.channel,
                    attempt=attempts,
                    error=exc.detail,
                )
                if give_up:
                    until = self._clock.now() + self._cooldown
                    self._down_until[name] = until
                    await self._share(name, until)
                    return DeliveryResult(
                        sent=False, attempts=attempts, error=str(exc), channel=name
                    )
                assert wait is not None
                await self._sleep(wait)
            else:
                await self._mark(delivery, DeliveryStatus.SENT, attempts, None)
                log.info(
                    "delivery.sent",
                    round_id=delivery.id,
                    channel=delivery.channel,
                    attempt=attempts,
                )
                if self._down_until.pop(name, None) is not None:
                    await self._share(name, self._clock.now())
                return DeliveryResult(sent=True, attempts=attempts, channel=name)
        raise AssertionError("unreachable: the last attempt always returns")

    async def _mark(
        self,
        delivery: Delivery,
        status: DeliveryStatus,
        attempts: int,
        error: str | None,
        *,
        retry_in: float | None = None,
    ) -> None:
        now = self._clock.now()
        retry_at = None if retry_in is None else now + timedelta(seconds=retry_in)
        await self._outbox.update(
            delivery.id,
            status=status,
            attempts=attempts,
            next_attempt_at=retry_at,
            last_error=error,
            at=now,
        )

    async def resume(self, *, owner_id: str | None = None) -> list[Resumed]:
        """Send every pending delivery (left by a crash); return those whose round is unrecorded.

        With `owner_id`, only that owner's deliveries.

        A row can be left unrecorded pending (the process died while sending) or
        finished (it died after the last attempt, before the round's record).
        The caller records each returned delivery's round.
        """
        await self.refresh()
        pending = await self._outbox.pending(owner_id=owner_id)
        for delivery in pending:
            await self.send(delivery)
        if pending:
            log.info("delivery.resumed", count=len(pending))
        # Back a day, and back to the oldest row just resumed, however old it was.
        since = min([self._clock.now() - UNRECORDED_LOOKBACK, *(d.created_at for d in pending)])
        left = await self._outbox.unrecorded(since=since, owner_id=owner_id)
        # Pending rows were just sent; the rest are read back as they were left.
        return [Resumed(d, _result_of(d)) for d in left]


def _result_of(delivery: Delivery) -> DeliveryResult:
    """How a stored delivery ended, as far as its row tells."""
    sent = delivery.status is DeliveryStatus.SENT
    error = None if sent else f"channel {delivery.channel!r}: {delivery.last_error or 'not sent'}"
    return DeliveryResult(
        sent=sent, attempts=delivery.attempts, error=error, channel=delivery.channel
    )
