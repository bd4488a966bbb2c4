"""The dispatcher: sends outbox rows through their channel, with bounded retries.

A round commits its outbox row (and the write-back message) first and sends
second, so a crash in between loses nothing: at start the daemon resumes
every pending row. Each attempt carries the round id as its idempotency key,
so a receiver that saw the first attempt of a resumed delivery can drop the
second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import structlog

from backthink.errors import DeliveryError, StoreError
from backthink.models import Delivery, DeliveryStatus, Outcome
from backthink.ports import Channel, Clock, Outbox, RoundStore

log = structlog.get_logger("backthink.delivery")

DEFAULT_BACKOFF_S = (1.0, 4.0)  # seconds to wait before the 2nd and 3rd attempt
RESUMED_NOTE = "delivery completed after a restart"

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class DeliveryResult:
    """How a delivery ended."""

    sent: bool
    attempts: int
    error: str | None = None


class Dispatcher:
    """Sends deliveries: one attempt, then one more per backoff step, then it gives up."""

    def __init__(
        self,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        clock: Clock,
        *,
        backoff_s: Sequence[float] = DEFAULT_BACKOFF_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._outbox = outbox
        self._channels = channels
        self._clock = clock
        self._backoff = tuple(backoff_s)
        self._sleep = sleep

    async def send(self, delivery: Delivery) -> DeliveryResult:
        """Try to deliver until sent, refused for good, or out of attempts; record each try."""
        attempts = delivery.attempts
        channel = self._channels.get(delivery.channel)
        for wait in (*self._backoff, None):
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
                    return DeliveryResult(sent=False, attempts=attempts, error=str(exc))
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
                return DeliveryResult(sent=True, attempts=attempts)
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

    async def resume(self, rounds: RoundStore) -> int:
        """Send every pending delivery (left by a crash) and record rounds left unrecorded.

        Returns:
            How many deliveries were resumed.
        """
        pending = await self._outbox.pending()
        for delivery in pending:
            result = await self.send(delivery)
            record = delivery.round_record
            if record is None:
                continue
            try:
                if await rounds.get(record.id) is not None:
                    continue
                outcome = Outcome.DELIVERED if result.sent else Outcome.FAILED
                await rounds.save(
                    record.model_copy(
                        update={
                            "outcome": outcome,
                            "reason": delivery.channel if result.sent else "delivery_failed",
                            "finished_at": self._clock.now(),
                            "notes": [*record.notes, RESUMED_NOTE]
                            + ([result.error] if result.error else []),
                        }
                    )
                )
            except StoreError as exc:
                log.error("delivery.record_failed", round_id=delivery.id, error=str(exc))
        if pending:
            log.info("delivery.resumed", count=len(pending))
        return len(pending)
