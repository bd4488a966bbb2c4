"""One round: pre-gate, state, context, prompt, one model call, footer, gate, delivery, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. Every round ends with exactly one outcome and
reason, recorded in the round store and in one `round.finished` log line.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from backthink import gate
from backthink.config import Settings
from backthink.context import conversation
from backthink.delivery import Dispatcher
from backthink.errors import ModelError, StoreError
from backthink.footer import parse_footer, reject_echo, reject_prompt_echo, suppression_reason
from backthink.models import (
    Decision,
    Delivery,
    DeliveryStatus,
    Message,
    ModelMessage,
    ModelReply,
    Outcome,
    OutgoingMessage,
    RoundRecord,
    RoundState,
    StateReading,
)
from backthink.ports import (
    Channel,
    Clock,
    MessageStore,
    ModelClient,
    Outbox,
    RoundStore,
    StateProvider,
)
from backthink.prompts import NAMED_TRIGGERS, PromptBook, render_prompt

log = structlog.get_logger("backthink.round")

# State problems that mean "nobody set up a state file": normal, not worth a note.
_QUIET_STATE_PROBLEMS = frozenset({"state_not_configured", "state_missing"})
# How many of the owner's recent messages and pushes the gate looks at.
OWNER_CHANNEL_LOOKBACK = 20
PUSH_LOOKBACK_SPARE = 4
# The most recent pushes the gate ever reads: enough for a daily cap or an
# unanswered limit up to 30, and a read that stays cheap whatever the settings.
MAX_PUSH_LOOKBACK = 64


@dataclass(frozen=True)
class Request:
    """The exact messages of one model round and what was learned building them."""

    messages: list[ModelMessage]
    state: StateReading
    recent: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Result:
    outcome: Outcome
    reason: str
    decision: Decision | None = None
    reply: ModelReply | None = None
    channel: str | None = None
    notes: list[str] = field(default_factory=list)
    # Set when the round's record was already saved with its delivery.
    recorded: RoundRecord | None = None


@dataclass(frozen=True)
class _Round:
    id: str
    owner_id: str
    trigger: str
    started: datetime


class Thinker:
    """Runs rounds for owners with the ports it is given."""

    def __init__(
        self,
        settings: Settings,
        *,
        messages: MessageStore,
        rounds: RoundStore,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        dispatcher: Dispatcher,
        state: StateProvider,
        model: ModelClient | None,
        clock: Clock,
        prompts: PromptBook,
        persona_prompt: str,
        model_missing_hint: str = "no model endpoint configured",
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._rounds = rounds
        self._outbox = outbox
        self._channels = channels
        self._dispatcher = dispatcher
        self._state = state
        self._model = model
        self._clock = clock
        self._prompts = prompts
        self._persona_prompt = persona_prompt.strip()
        self._model_missing_hint = model_missing_hint
        self._in_flight: set[str] = set()

    async def prepare(
        self,
        owner_id: str,
        trigger: str,
        *,
        at: datetime,
        recent: Sequence[Message] | None = None,
    ) -> Request:
        """Take the state snapshot and assemble the exact request, calling no model.

        `recent` is the history already read by the round; without it the
        history is read here, and a failed read leaves a prompt-only request.
        """
        notes: list[str] = []
        reading = self._state.read(at)
        if reading.problem and reading.problem not in _QUIET_STATE_PROBLEMS:
            notes.append(reading.problem)
        if recent is None:
            try:
                recent = await self._messages.recent(
                    owner_id, self._settings.prompt.recent_messages
                )
            except StoreError as exc:
                notes.append(f"context_unavailable: {exc}")
                recent = []
        messages = self._assemble(recent, trigger, at, reading.state)
        return Request(messages=messages, state=reading, recent=list(recent), notes=notes)

    def _assemble(
        self, recent: Sequence[Message], trigger: str, at: datetime, state: RoundState | None
    ) -> list[ModelMessage]:
        s = self._settings
        out: list[ModelMessage] = []
        if self._persona_prompt:
            out.append(ModelMessage(role="system", text=self._persona_prompt))
        out.extend(
            conversation(
                recent,
                persona_id=s.persona.id,
                names={s.persona.id: s.persona.name},
                language=s.prompt.language,
            )
        )
        prompt = render_prompt(
            self._prompts,
            trigger=trigger,
            at=at,
            tz=s.owner.tz,
            state=state,
            channels=list(s.channels),
            persona_name=s.persona.name or s.persona.id,
            owner_name=s.owner.name or ("主人" if s.prompt.language == "zh" else "your owner"),
        )
        out.append(ModelMessage(role="user", text=prompt))
        return out

    def connected(self) -> list[str]:
        """Names of the channels that can deliver now, in configuration order."""
        return [name for name, channel in self._channels.items() if channel.connected]

    async def run_round(self, owner_id: str, trigger: str) -> RoundRecord:
        """Run one round now and return its record; never raises except on cancellation."""
        this = _Round(uuid.uuid4().hex, owner_id, trigger, self._clock.now())
        with structlog.contextvars.bound_contextvars(round_id=this.id, owner_id=owner_id):
            if owner_id in self._in_flight:
                # Single flight: a second round for the same owner would see the same
                # context and could push the same thought twice.
                result = _Result(Outcome.SKIPPED, "busy")
            else:
                self._in_flight.add(owner_id)
                try:
                    result = await self._think(this)
                except asyncio.CancelledError:
                    raise
                except StoreError as exc:
                    log.error("round.store_failed", error=str(exc))
                    result = _Result(Outcome.FAILED, "store_error", notes=[str(exc)])
                except Exception:
                    log.exception("round.crashed")
                    result = _Result(Outcome.FAILED, "internal_error")
                finally:
                    self._in_flight.discard(owner_id)
            record = result.recorded or self._record(this, result)
            try:
                if result.recorded is None:
                    await self._rounds.save(record)
            except StoreError as exc:
                log.error("round.record_failed", error=str(exc))
            log.info(
                "round.finished",
                trigger=trigger if trigger.strip().lower() in NAMED_TRIGGERS else "poke",
                outcome=record.outcome.value,
                reason=record.reason,
                channel=record.channel,
                urgency=record.urgency.value if record.urgency else None,
                latency_ms=record.latency_ms,
                prompt_tokens=record.prompt_tokens,
                completion_tokens=record.completion_tokens,
                notes=record.notes or None,
            )
            return record

    async def _think(self, this: _Round) -> _Result:
        g = self._settings.gate
        tz = self._settings.owner.tz
        # One read serves the pre-gate and the context: the history is cheap next
        # to a second trip to the database.
        view = await self._messages.session_view(
            this.owner_id, self._settings.prompt.recent_messages
        )
        skip = gate.pre_gate(
            settings=g,
            tz=tz,
            connected=self.connected(),
            last_owner_message_at=view.last_owner_message_at,
            at=this.started,
        )
        if skip is not None:
            return _Result(skip.outcome, skip.reason)

        request = await self.prepare(
            this.owner_id, this.trigger, at=this.started, recent=view.recent
        )
        notes = list(request.notes)
        if self._model is None:
            return _Result(Outcome.FAILED, "model_error", notes=[*notes, self._model_missing_hint])
        try:
            reply = await self._model.complete(request.messages)
        except ModelError as exc:
            return _Result(Outcome.FAILED, exc.reason, notes=[*notes, str(exc)])
        decision = parse_footer(reply.text, max_body_chars=g.max_body_chars)
        user_texts = (m.text for m in request.recent if m.role != "assistant")
        decision = reject_echo(decision, user_texts)
        decision = reject_prompt_echo(decision, request.messages[-1].text)
        notes.extend(decision.problems)
        reason = suppression_reason(decision)
        if reason is not None:
            return _Result(Outcome.SUPPRESSED, reason, decision, reply, notes=notes)

        try:
            at = self._clock.now()
            verdict = gate.evaluate(
                decision,
                state=request.state.state,
                history=await self._history(this.owner_id),
                connected=self.connected(),
                settings=g,
                tz=tz,
                started_at=this.started,
                at=at,
            )
            notes.extend(verdict.notes)
            if not verdict.deliver or verdict.channel is None:
                return _Result(verdict.outcome, verdict.reason, decision, reply, notes=notes)
            return await self._deliver(this, decision, reply, verdict.channel, at, notes)
        except StoreError as exc:
            # The decision and its cost stay on the record even when the database fails.
            log.error("round.store_failed", error=str(exc))
            return _Result(Outcome.FAILED, "store_error", decision, reply, notes=[*notes, str(exc)])

    async def _history(self, owner_id: str) -> gate.GateHistory:
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
        owner = activity.owner_messages
        return gate.GateHistory(
            last_owner_message_at=owner[0][1] if owner else None,
            owner_channels=[channel for channel, _ in owner],
            pushes=activity.pushes,
        )

    async def _deliver(
        self,
        this: _Round,
        decision: Decision,
        reply: ModelReply,
        channel: str,
        at: datetime,
        notes: list[str],
    ) -> _Result:
        persona = self._settings.persona
        outgoing = OutgoingMessage(
            round_id=this.id,
            owner_id=this.owner_id,
            persona_id=persona.id,
            persona_name=persona.name,
            text=decision.body,
            urgency=decision.urgency,
            created_at=at,
        )
        writeback = Message(
            owner_id=this.owner_id,
            role="assistant",
            text=decision.body,
            speaker=persona.id,
            channel=channel,
            origin="proactive",
            created_at=at,
        )
        delivered = _Result(Outcome.DELIVERED, channel, decision, reply, channel, notes)
        # The web channel's delivery is the write-back itself: its row is committed
        # as sent, with the round's final record, in one transaction, and nothing
        # is left to dispatch.
        by_writeback = self._channels[channel].delivered_by_writeback
        final = self._record(this, delivered) if by_writeback else None
        delivery = Delivery(
            id=this.id,
            owner_id=this.owner_id,
            channel=channel,
            message=outgoing,
            status=DeliveryStatus.SENT if by_writeback else DeliveryStatus.PENDING,
            attempts=1 if by_writeback else 0,
            next_attempt_at=None if by_writeback else at,
            created_at=at,
            updated_at=at,
            # Kept with a pending row so a round cut short by a crash is still
            # recorded once the daemon resumes the delivery.
            round_record=None if by_writeback else self._record(this, delivered),
        )
        if not await self._outbox.commit(delivery, writeback, record=final):
            log.debug("round.already_committed")
            return delivered
        if final is not None:
            log.info("delivery.sent", round_id=this.id, channel=channel, attempt=1)
            delivered.recorded = final
            return delivered
        sent = await self._dispatcher.send(delivery)
        if not sent.sent:
            failure = [*notes, sent.error] if sent.error else notes
            return _Result(Outcome.FAILED, "delivery_failed", decision, reply, channel, failure)
        return delivered

    def _record(self, this: _Round, result: _Result) -> RoundRecord:
        decision, reply = result.decision, result.reply
        return RoundRecord(
            id=this.id,
            owner_id=this.owner_id,
            trigger=this.trigger,
            started_at=this.started,
            finished_at=self._clock.now(),
            outcome=result.outcome,
            reason=result.reason,
            push=decision.push if decision else None,
            urgency=decision.urgency if decision else None,
            decided_channel=decision.channel if decision else None,
            body=decision.body if decision and decision.body else None,
            channel=result.channel,
            model=reply.model if reply else None,
            prompt_tokens=reply.prompt_tokens if reply else None,
            completion_tokens=reply.completion_tokens if reply else None,
            latency_ms=reply.latency_ms if reply else None,
            raw_reply=reply.text if reply else None,
            notes=list(result.notes),
        )
