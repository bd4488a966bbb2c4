"""One round: pre-gate, prompt, model, footer, gate, delivery handoff, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. Every round ends with exactly one outcome and
reason, recorded by the `Recorder` with one `round.finished` log line.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from backthink import gate
from backthink.config import Settings
from backthink.delivery import Dispatcher, Handoff
from backthink.echo import reject_echo, reject_prompt_echo
from backthink.errors import ModelError, StoreError
from backthink.footer import parse_footer, private_thought, suppression_reason
from backthink.journal import MemoryBlock, journal_share
from backthink.models import (
    Memory,
    MemoryKind,
    Message,
    ModelReply,
    Outcome,
    Reason,
    RoundRecord,
    SessionView,
)
from backthink.pause import Pauses
from backthink.ports import Clock, MemoryStore, MessageStore, ModelClient
from backthink.record import (
    INTERRUPTED_NOTE,
    Ending,
    Recorder,
    RoundStart,
    resumed_record,
    round_record,
)
from backthink.request import Request, RequestBuilder
from backthink.state import FUTURE_SKEW

log = structlog.get_logger("backthink.round")

# How many of the owner's recent messages and pushes the gate looks at.
OWNER_CHANNEL_LOOKBACK = 20
PUSH_LOOKBACK_SPARE = 4
# The most recent pushes the gate ever reads: enough for a daily cap or an
# unanswered limit up to 30, and a read that stays cheap whatever the settings.
MAX_PUSH_LOOKBACK = 64


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
        memories: MemoryStore | None = None,
        pauses: Pauses | None = None,
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
        self._model_missing_hint = model_missing_hint
        self._pauses = pauses
        self._in_flight: set[str] = set()

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
        memory = await self._recollect(owner_id, view.recent)
        return self._requests.build(view.recent, trigger, at, memory=memory)

    async def run_round(self, owner_id: str, trigger: str) -> RoundRecord:
        """Run one round now and return its record; never raises except on cancellation."""
        start = RoundStart(uuid.uuid4().hex, owner_id, trigger, self._clock.now())
        with structlog.contextvars.bound_contextvars(round_id=start.id, owner_id=owner_id):
            if owner_id in self._in_flight:
                # Single flight: a second round for the same owner would see the same
                # context and could push the same thought twice.
                ending = Ending(Outcome.SKIPPED, Reason.BUSY)
            else:
                self._in_flight.add(owner_id)
                # What the round has learned so far, so a round cut off still says it.
                progress = Ending(Outcome.FAILED, Reason.INTERRUPTED)
                try:
                    ending = await self._think(start, progress)
                except asyncio.CancelledError:
                    progress.notes.append(INTERRUPTED_NOTE)
                    await self._recorder.save(
                        round_record(start, progress, finished=self._clock.now())
                    )
                    raise
                except StoreError as exc:
                    log.error("round.store_failed", error=str(exc))
                    ending = Ending(Outcome.FAILED, Reason.STORE_ERROR, notes=[str(exc)])
                except Exception:
                    log.exception("round.crashed")
                    ending = Ending(Outcome.FAILED, Reason.INTERNAL_ERROR)
                finally:
                    self._in_flight.discard(owner_id)
            record = round_record(start, ending, finished=self._clock.now())
            await self._recorder.save(record)
            return record

    async def _think(self, start: RoundStart, progress: Ending) -> Ending:
        g = self._settings.gate
        tz = self._settings.owner.tz
        # A pause holds for every trigger and is checked before anything else is read.
        if self._pauses is not None:
            pause = await self._pauses.state(start.owner_id, start.started)
            if pause.paused:
                return Ending(Outcome.SKIPPED, Reason.DISABLED, notes=[pause.describe(tz)])
        # One read serves the pre-gate and the context. A failed read raises
        # StoreError here, before any model call: a round that cannot be gated
        # or recorded spends no tokens.
        view = await self._messages.session_view(
            start.owner_id, self._settings.prompt.recent_messages
        )
        skip = gate.pre_gate(
            settings=g,
            tz=tz,
            connected=self.connected(),
            last_owner_message_at=_latest_credible(view, start.started),
            at=start.started,
        )
        if skip is not None:
            return Ending(skip.outcome, skip.reason)

        memory = await self._recollect(start.owner_id, view.recent)
        request = self._requests.build(view.recent, start.trigger, start.started, memory=memory)
        notes = progress.notes
        notes.extend(request.notes)
        if self._model is None:
            return Ending(
                Outcome.FAILED, Reason.MODEL_ERROR, notes=[*notes, self._model_missing_hint]
            )
        try:
            reply = await self._model.complete(request.messages)
        except ModelError as exc:
            return Ending(Outcome.FAILED, exc.reason, notes=[*notes, str(exc)])
        progress.reply = reply
        notes.extend(reply.notes)
        await self._keep_thought(start, reply, notes)

        decision = parse_footer(reply.text, max_body_chars=g.max_body_chars)
        decision = reject_echo(decision, request.untrusted())
        decision = reject_prompt_echo(decision, request.prompt)
        notes.extend(decision.problems)
        progress.decision = decision
        reason = suppression_reason(decision)
        if reason is not None:
            return Ending(Outcome.SUPPRESSED, reason, decision, reply, notes=notes)

        try:
            at = self._clock.now()
            history = await self._history(start.owner_id, at)
            if history.ignored_future:
                notes.append(gate.FUTURE_OWNER_MESSAGE_NOTE)
            verdict = gate.evaluate(
                decision,
                state=request.state.state,
                history=history.gate,
                connected=self.connected(),
                session_channel=self._delivery.session_channel,
                settings=g,
                tz=tz,
                started_at=start.started,
                at=at,
            )
            notes.extend(verdict.notes)
            if not verdict.deliver or verdict.channel is None:
                return Ending(verdict.outcome, verdict.reason, decision, reply, notes=notes)
            channel = progress.channel = verdict.channel
            sent = await self._delivery.hand_over(
                Handoff(
                    start.id,
                    start.owner_id,
                    start.trigger,
                    decision,
                    channel,
                    at,
                    fallbacks=verdict.fallbacks,
                )
            )
            channel = sent.channel or channel
            notes.extend(sent.notes)
        except StoreError as exc:
            # The decision and its cost stay on the record even when the database fails.
            log.error("round.store_failed", error=str(exc))
            return Ending(
                Outcome.FAILED, Reason.STORE_ERROR, decision, reply, notes=[*notes, str(exc)]
            )
        if not sent.sent:
            failure = [*notes, sent.error] if sent.error else notes
            return Ending(Outcome.FAILED, Reason.DELIVERY_FAILED, decision, reply, channel, failure)
        return Ending(Outcome.DELIVERED, channel, decision, reply, channel, notes)

    async def _recollect(self, owner_id: str, window: Sequence[Message]) -> MemoryBlock:
        """The latest thoughts and what the window recalls, within `memory.max_chars`.

        Memory helps a round but is not needed for one: when it cannot be read
        the round goes on without it, with a note saying so.
        """
        m = self._settings.memory
        if self._memories is None or m.max_chars <= 0 or (m.journal <= 0 and m.recall <= 0):
            return MemoryBlock()
        try:
            thoughts = await self._memories.latest_thoughts(owner_id, m.journal)
            shown = sum(len(t.text) for t in thoughts)
            left = m.max_chars - min(shown, journal_share(m.max_chars, recall=m.recall))
            recalled = (
                await self._memories.recall(
                    owner_id,
                    window,
                    limit=m.recall,
                    max_chars=left,
                    exclude=[t.id for t in thoughts if t.id is not None],
                )
                if m.recall > 0 and left > 0
                else []
            )
        except StoreError as exc:
            log.warning("round.memory_unavailable", error=str(exc))
            return MemoryBlock(notes=[f"memory_unavailable: {exc}"])
        return MemoryBlock(thoughts=list(reversed(thoughts)), recalled=recalled)

    async def _keep_thought(self, start: RoundStart, reply: ModelReply, notes: list[str]) -> None:
        """Keep the reply's private thought as a memory of kind thought, linked to the round."""
        m = self._settings.memory
        if self._memories is None:
            return
        text = private_thought(reply.text, max_chars=m.thought_chars)
        if not text:
            return
        try:
            await self._memories.add(
                Memory(
                    owner_id=start.owner_id,
                    kind=MemoryKind.THOUGHT,
                    text=text,
                    created_at=start.started,
                    source=f"round:{start.id}",
                    round_id=start.id,
                )
            )
        except StoreError as exc:
            log.warning("round.thought_not_kept", error=str(exc))
            notes.append(f"thought_not_kept: {exc}")

    async def _history(self, owner_id: str, at: datetime) -> _History:
        # Read fresh after the model call, so a message the owner sent while it was
        # thinking counts; newest first, so the first row is the owner's latest.
        g = self._settings.gate
        # Enough pushes for two local days of the cap (a 24 h window spans two) and
        # for the unanswered count, plus a few written back by failed deliveries.
        lookback = min(
            2 * max(g.daily_cap, g.max_unanswered) + PUSH_LOOKBACK_SPARE, MAX_PUSH_LOOKBACK
        )
        activity = await self._messages.owner_activity(
            owner_id, messages=OWNER_CHANNEL_LOOKBACK, pushes=lookback
        )
        # A message dated past the clock skew (a wrong clock where it was written) is
        # no activity, and must not hide the owner's real latest message either.
        owner = [(ch, when) for ch, when in activity.owner_messages if when <= at + FUTURE_SKEW]
        return _History(
            gate.GateHistory(
                last_owner_message_at=owner[0][1] if owner else None,
                owner_channels=[channel for channel, _ in owner],
                pushes=activity.pushes,
            ),
            ignored_future=len(owner) < len(activity.owner_messages),
        )

    async def resume(self) -> int:
        """Finish deliveries a previous process left, and record their rounds.

        Returns:
            How many rounds were recorded.
        """
        resumed = await self._delivery.resume()
        for left in resumed:
            with structlog.contextvars.bound_contextvars(
                round_id=left.delivery.id, owner_id=left.delivery.owner_id
            ):
                record = resumed_record(left.delivery, left.result, finished=self._clock.now())
                await self._recorder.save(record)
        return len(resumed)


@dataclass(frozen=True)
class _History:
    gate: gate.GateHistory
    ignored_future: bool


def _latest_credible(view: SessionView, at: datetime) -> datetime | None:
    """When the owner last wrote, passing over messages dated beyond the clock skew."""
    last = view.last_owner_message_at
    if last is None or last <= at + FUTURE_SKEW:
        return last
    # The newest is mis-dated: the owner's real latest message is in the window, if recent.
    return max(
        (
            m.created_at
            for m in view.recent
            if m.role == "user" and m.created_at <= at + FUTURE_SKEW
        ),
        default=None,
    )
