"""One round: pre-gate, prompt, model, reply, gate, delivery handoff, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. Its steps return values: what the round learns
is passed on, never written into a shared object. Every round ends with
exactly one outcome and reason, recorded by the `Recorder` with one
`round.finished` log line.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import datetime

import structlog

from backthink.config import Settings
from backthink.decision import gate
from backthink.decision.echo import reject_echo, reject_prompt_echo
from backthink.decision.failsafe import suppression_reason
from backthink.decision.reply import read_reply
from backthink.delivery.dispatcher import Dispatcher, Handoff
from backthink.errors import StoreError
from backthink.memory.recollect import keep_thought, recollect
from backthink.models import Outcome, Reason
from backthink.ports import Clock, MemoryStore, MessageStore, ModelClient, RoundStore
from backthink.records import RoundRecord, ToolUse
from backthink.round.ask import ask
from backthink.round.history import gate_history, latest_credible, owner_spoke
from backthink.round.pause import Pauses
from backthink.round.record import (
    INTERRUPTED_NOTE,
    Ending,
    Recorder,
    RoundStart,
    reply_chars,
    resumed_record,
    round_record,
    slot_note,
)
from backthink.round.request import Request, RequestBuilder
from backthink.round.unchanged import UnchangedBeats, asks_every_time
from backthink.tools.budget import OfferedTools
from backthink.tools.loop import Stop
from backthink.tools.offer import ToolOffer

log = structlog.get_logger("backthink.round")


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
        memories: MemoryStore | None = None,
        pauses: Pauses | None = None,
        rounds: RoundStore | None = None,
        model_missing_hint: str = "no model endpoint configured",
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._memories = memories if settings.memory.enabled else None
        self._requests = requests
        self._model = model
        self._delivery = delivery
        self._recorder = recorder
        self._clock = clock
        self._offer = offer
        self._model_missing_hint = model_missing_hint
        self._pauses = pauses
        self._beats = UnchangedBeats(
            settings, builder=requests, memories=self._memories, rounds=rounds
        )
        self._in_flight: set[str] = set()
        self._reply_chars = reply_chars(settings.model.max_tokens)

    def connected(self) -> list[str]:
        """Names of the channels that can deliver now, in configuration order."""
        return self._delivery.connected()

    async def prepare(self, owner_id: str, trigger: str) -> Request:
        """Read the history and assemble the exact request a round would send now.

        Raises:
            StoreError: the history cannot be read.
        """
        at = self._clock.now()
        view = await self._messages.session_view(owner_id, self._settings.prompt.recent_messages)
        memory = await recollect(self._memories, self._settings.memory, owner_id, view.recent)
        return self._requests.build(view.recent, trigger, at, memory=memory)

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
        with structlog.contextvars.bound_contextvars(round_id=start.id, owner_id=owner_id):
            if owner_id in self._in_flight:
                # Single flight: a second round for the same owner would see the same
                # context and could push the same thought twice.
                ending = Ending(Outcome.SKIPPED, Reason.BUSY)
            else:
                self._in_flight.add(owner_id)
                try:
                    ending = await self._think(start, slot)
                finally:
                    self._in_flight.discard(owner_id)
            if slot is not None:
                ending = replace(ending, notes=(slot, *ending.notes))
            record = round_record(
                start, ending, finished=self._clock.now(), max_reply_chars=self._reply_chars
            )
            await self._recorder.save(record)
            return record

    async def _think(self, start: RoundStart, slot: str | None) -> Ending:
        """The round's steps, each returning what the next needs.

        `sofar` is what the round has learned at each point: every ending
        carries its tool calls and what its prompt showed, and a round cut off
        by shutdown records all it knew.
        """
        sofar = Ending(Outcome.FAILED, Reason.INTERRUPTED)

        def used(use: ToolUse) -> None:
            nonlocal sofar
            sofar = replace(sofar, tools=(*sofar.tools, use))

        try:
            prepared = await self._pre_gate(start)
            if isinstance(prepared, Ending):
                return prepared
            request, last_owner_at = prepared
            sofar = replace(sofar, recalled=tuple(request.recalled), notes=tuple(request.notes))
            assert self._model is not None  # the pre-gate skips a round without one
            # From here on the round calls the model: its record keeps what it asked.
            sofar = replace(sofar, digest=self._beats.digest(request, start.started))
            asked = await ask(
                self._model,
                request,
                self._offer,
                self._settings.tools,
                owner_id=start.owner_id,
                round_id=start.id,
                started=start.started,
                owner_spoke=lambda: owner_spoke(
                    self._messages, start.owner_id, since=last_owner_at, now=self._clock.now()
                ),
                on_use=used,
                max_chars=self._settings.prompt.max_chars,
            )
            sofar = replace(
                sofar,
                tools=asked.uses,
                notes=(*sofar.notes, *asked.notes),
                offered=asked.offered,
            )
            if asked.reply is None:
                error = asked.error
                assert error is not None  # a step without a reply ended in an error
                return sofar.ended(Outcome.FAILED, error.reason, note=str(error))
            sofar = replace(sofar, reply=asked.reply, notes=(*sofar.notes, *asked.reply.notes))
            read = read_reply(
                asked.reply.text,
                output=self._settings.model.output,
                max_body_chars=self._settings.gate.max_body_chars,
            )
            kept = await keep_thought(
                self._memories,
                owner_id=start.owner_id,
                round_id=start.id,
                at=start.started,
                text=read.journal_thought(self._settings.memory.thought_chars),
                outside=[*request.untrusted(), *asked.results],
            )
            if kept is not None:
                sofar = replace(sofar, notes=(*sofar.notes, kept))
            if asked.stop is not None:
                limit = asked.stop is Stop.TOOL_LIMIT
                stopped = Reason.TOOL_LIMIT if limit else Reason.OWNER_ACTIVE
                return sofar.ended(Outcome.SUPPRESSED, stopped)
            decision = reject_echo(read.decision, [*request.untrusted(), *asked.results])
            decision = reject_prompt_echo(decision, request.prompt)
            sofar = replace(sofar, decision=decision, notes=(*sofar.notes, *decision.problems))
            reason = suppression_reason(decision)
            if reason is Reason.NO_PUSH and not asks_every_time(start.trigger):
                sofar = replace(
                    sofar,
                    digest=await self._beats.silent_digest(request, start.owner_id, start.started),
                )
            if reason is not None:
                return sofar.ended(Outcome.SUPPRESSED, reason)
            try:
                at = self._clock.now()
                verdict, sofar = await self._verdict(start, request, sofar, at)
                if not verdict.deliver or verdict.channel is None:
                    return sofar.ended(verdict.outcome, verdict.reason)
                sofar = replace(sofar, channel=verdict.channel)
                sent = await self._delivery.hand_over(
                    Handoff(
                        start.id,
                        start.owner_id,
                        start.trigger,
                        decision,
                        verdict.channel,
                        at,
                        fallbacks=verdict.fallbacks,
                    )
                )
            except StoreError as exc:
                # The decision and its cost stay on the record even when the database fails.
                log.error("round.store_failed", error=str(exc))
                return sofar.ended(Outcome.FAILED, Reason.STORE_ERROR, note=str(exc))
            channel = sent.channel or verdict.channel
            sofar = replace(sofar, channel=channel, notes=(*sofar.notes, *sent.notes))
            if not sent.sent:
                failed = sofar.ended(Outcome.FAILED, Reason.DELIVERY_FAILED)
                return (
                    failed if not sent.error else replace(failed, notes=(*failed.notes, sent.error))
                )
            return sofar.ended(Outcome.DELIVERED, channel)
        except asyncio.CancelledError:
            notes = (*((slot,) if slot is not None else ()), *sofar.notes, INTERRUPTED_NOTE)
            interrupted = replace(sofar, notes=notes)
            await self._recorder.save(
                round_record(
                    start,
                    interrupted,
                    finished=self._clock.now(),
                    max_reply_chars=self._reply_chars,
                )
            )
            raise
        except StoreError as exc:
            log.error("round.store_failed", error=str(exc))
            return Ending(
                Outcome.FAILED,
                Reason.STORE_ERROR,
                notes=(str(exc),),
                tools=sofar.tools,
                recalled=sofar.recalled,
                offered=sofar.offered,
            )
        except Exception:
            log.exception("round.crashed")
            return Ending(
                Outcome.FAILED,
                Reason.INTERNAL_ERROR,
                tools=sofar.tools,
                recalled=sofar.recalled,
                offered=sofar.offered,
            )

    async def _pre_gate(self, start: RoundStart) -> Ending | tuple[Request, datetime | None]:
        """The checks before any model call, then the request; an Ending when the round skips.

        Raises:
            StoreError: the history cannot be read: a round that cannot be
                gated or recorded spends no tokens.
        """
        tz = self._settings.owner.tz
        # A pause holds for every trigger and is checked before anything else is read.
        if self._pauses is not None:
            pause = await self._pauses.state(start.owner_id, start.started)
            if pause.paused:
                return Ending(Outcome.SKIPPED, Reason.DISABLED, notes=(pause.describe(tz),))
        if self._model is None:
            # Nothing to think with: nothing is read or spent, and the round says how to fix it.
            return Ending(Outcome.SKIPPED, Reason.NO_MODEL, notes=(self._model_missing_hint,))
        # One read serves the pre-gate and the context.
        view = await self._messages.session_view(
            start.owner_id, self._settings.prompt.recent_messages
        )
        last_owner_at = latest_credible(view, start.started)
        # Which channels are down is shared with every process: read it before choosing.
        await self._delivery.refresh()
        skip = gate.pre_gate(
            settings=self._settings.gate,
            tz=tz,
            connected=self.connected(),
            last_owner_message_at=last_owner_at,
            at=start.started,
            owner_channels=[m.channel for m in reversed(view.recent) if m.role == "user"],
            session_channel=self._delivery.session_channel,
        )
        if skip is not None:
            return Ending(skip.outcome, skip.reason)
        memory = await recollect(self._memories, self._settings.memory, start.owner_id, view.recent)
        request = self._requests.build(view.recent, start.trigger, start.started, memory=memory)
        unchanged = await self._skip_unchanged(start, request)
        if unchanged is not None:
            return unchanged
        return request, last_owner_at

    async def _skip_unchanged(self, start: RoundStart, request: Request) -> Ending | None:
        """`skipped/unchanged` for a heartbeat that would ask what the last silent round asked.

        Raises:
            StoreError: the round log cannot be read.
        """
        same = await self._beats.same_as_before(request, start.owner_id, start.started)
        if same is None:
            return None
        return Ending(
            Outcome.SKIPPED,
            Reason.UNCHANGED,
            notes=(f"nothing new since round {same.id[:12]}, which stayed silent",),
        )

    async def _verdict(
        self, start: RoundStart, request: Request, sofar: Ending, at: datetime
    ) -> tuple[gate.Verdict, Ending]:
        """The gate's verdict on the round's push, judged on the owner's history read now.

        Raises:
            StoreError: the history cannot be read.
        """
        decision = sofar.decision
        assert decision is not None
        history = await gate_history(self._messages, start.owner_id, self._settings.gate, at)
        notes = sofar.notes
        if history.ignored_future:
            notes = (*notes, gate.FUTURE_OWNER_MESSAGE_NOTE)
        verdict = gate.evaluate(
            decision,
            state=request.state.state,
            history=history.gate,
            connected=self.connected(),
            session_channel=self._delivery.session_channel,
            settings=self._settings.gate,
            tz=self._settings.owner.tz,
            started_at=start.started,
            at=at,
        )
        return verdict, replace(sofar, notes=(*notes, *verdict.notes))

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
