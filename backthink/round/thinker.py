"""One round: pre-gate, prompt, model, reply, gate, delivery handoff, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. The steps (`backthink.round.steps`) each return
a frozen value that carries its own notes (`backthink.round.stages`), kept
on the round's trail as they return; every way out (a delivery, a skip, a
cancellation, a database error, a bug) makes the record from that trail in
one place (`backthink.round.recorder.assemble`). Every round ends with exactly
one outcome and reason, recorded by the `Recorder` with one `round.finished`
log line.

One round at a time per owner: a round holds its owner in the process's
registry of live turns (`backthink.ports.Turns`, which the fleet shares
between every app of the process and, on PostgreSQL, with every process on
the database); a second round meets the hold and ends `skipped/busy`.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import datetime

import structlog

from backthink.config import Settings
from backthink.delivery.dispatcher import Dispatcher
from backthink.errors import StoreError
from backthink.models import Outcome, Reason
from backthink.ports import (
    Clock,
    MemoryStore,
    MessageStore,
    ModelClient,
    RoundStore,
    RoundTurn,
    Turns,
)
from backthink.records import RoundRecord
from backthink.round.pause import Pauses
from backthink.round.recorder import (
    INTERRUPTED_NOTE,
    Recorder,
    RoundStart,
    assemble,
    reply_chars,
    resumed_record,
    slot_note,
)
from backthink.round.request import Request, RequestBuilder
from backthink.round.stages import Exit, Trail
from backthink.round.steps import Steps
from backthink.tools.definition_budget import OfferedTools
from backthink.tools.offer import ToolOffer

log = structlog.get_logger(__name__)

BUSY_NOTE = "another round of the owner is running"


class Thinker:
    """Runs rounds for owners with the ports it is given."""

    def __init__(
        self,
        settings: Settings,
        *,
        messages: MessageStore,
        requests: RequestBuilder,
        model: ModelClient | None,
        delivery: Dispatcher,
        recorder: Recorder,
        clock: Clock,
        offer: ToolOffer,
        turns: Turns,
        memories: MemoryStore | None = None,
        pauses: Pauses | None = None,
        rounds: RoundStore | None = None,
        model_missing_hint: str = "no model endpoint configured",
    ) -> None:
        self._delivery = delivery
        self._recorder = recorder
        self._clock = clock
        self._offer = offer
        self._steps = Steps(
            settings,
            messages=messages,
            requests=requests,
            model=model,
            delivery=delivery,
            clock=clock,
            offer=offer,
            memories=memories if settings.memory.enabled else None,
            pauses=pauses,
            rounds=rounds,
            model_missing_hint=model_missing_hint,
        )
        self._turns = turns
        self._reply_chars = reply_chars(settings.model.max_tokens)

    def connected(self) -> list[str]:
        """Names of the channels that can deliver now, in configuration order."""
        return self._delivery.connected()

    async def prepare(self, owner_id: str, trigger: str) -> Request:
        """Read the history and assemble the exact request a round would send now.

        Raises:
            StoreError: the history cannot be read.
        """
        return await self._steps.request(owner_id, trigger, self._clock.now())

    async def tool_offer(self, owner_id: str, *, servers: bool = True) -> OfferedTools:
        """What a round would offer now (see `ToolOffer.now`).

        Raises:
            StoreError: whether the endpoint refused tools cannot be read.
        """
        return await self._offer.now(owner_id, servers=servers)

    async def run_round(
        self,
        owner_id: str,
        trigger: str,
        *,
        round_id: str | None = None,
        scheduled_for: datetime | None = None,
    ) -> RoundRecord:
        """Run one round now and return its record; never raises except on cancellation.

        `round_id` (default: a new one) is the round's idempotency key: a queue
        that runs a round again after a crash passes the same id, so it is
        recorded and delivered once. `scheduled_for` is the slot a queued round
        was due in; its record notes it, and how late the round began.
        """
        start = RoundStart(round_id or uuid.uuid4().hex, owner_id, trigger, self._clock.now())
        slot = slot_note(scheduled_for, start.started) if scheduled_for is not None else None
        trail = Trail(slot=slot)
        with structlog.contextvars.bound_contextvars(round_id=start.id, owner_id=owner_id):
            try:
                async with self._turns.round(owner_id) as turn:
                    if turn is None:
                        # Single flight: a second round for the same owner would see the same
                        # context and could push the same thought twice.
                        start, left = _busy(start, round_id)
                    else:
                        left = await self._run(start, trail, turn)
            except StoreError as exc:
                # The owner's hold shared with other processes could not be taken.
                log.error("round.store_failed", error=str(exc))
                left = Exit(Outcome.FAILED, Reason.STORE_ERROR, str(exc))
            with structlog.contextvars.bound_contextvars(round_id=start.id):
                return await self._record(start, left, trail)

    async def _run(self, start: RoundStart, trail: Trail, turn: RoundTurn) -> Exit:
        """The round's steps, and the way out of each failure; a cut-off round is recorded here.

        The trail keeps every stage reached, so each way out records all the
        round knew: a bug after the model answered keeps the reply, its cost
        and the decision as a database error does.
        """
        try:
            return await self._steps.run(start, trail, overtaken=turn.overtaken)
        except asyncio.CancelledError:
            cut_off = Exit(Outcome.FAILED, Reason.INTERRUPTED, INTERRUPTED_NOTE)
            await self._record(start, cut_off, trail)
            raise
        except StoreError as exc:
            log.error("round.store_failed", error=str(exc))
            return Exit(Outcome.FAILED, Reason.STORE_ERROR, str(exc))
        except Exception:
            log.exception("round.crashed")
            return Exit(Outcome.FAILED, Reason.INTERNAL_ERROR)

    async def _record(self, start: RoundStart, left: Exit, trail: Trail) -> RoundRecord:
        """Make the round's record from what it reached, and save it."""
        finished = self._clock.now()
        record = assemble(start, left, trail, finished=finished, max_reply_chars=self._reply_chars)
        await self._recorder.save(record)
        return record

    async def resume(self, *, owner_id: str | None = None) -> int:
        """Finish deliveries a previous process left (one owner's, or all), and record their rounds.

        Returns:
            How many rounds were recorded.
        """
        resumed = await self._delivery.resume(owner_id=owner_id)
        for left in resumed:
            with structlog.contextvars.bound_contextvars(
                round_id=left.delivery.id, owner_id=left.delivery.owner_id
            ):
                record = resumed_record(left.delivery, left.result, finished=self._clock.now())
                await self._recorder.save(record)
        return len(resumed)


def _busy(start: RoundStart, asked: str | None) -> tuple[RoundStart, Exit]:
    """The start and exit of a round that met its owner's round running.

    A round asked for under an id of its own (a queued slot, run again) is
    recorded under a new one: the slot's id stays with the round that holds
    the owner, which may be that very slot's, still running elsewhere.
    """
    if asked is None:
        return start, Exit(Outcome.SKIPPED, Reason.BUSY, BUSY_NOTE)
    note = f"{BUSY_NOTE}; asked as round {asked}"
    return replace(start, id=uuid.uuid4().hex), Exit(Outcome.SKIPPED, Reason.BUSY, note)
