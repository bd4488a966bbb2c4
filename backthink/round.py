"""One round: state, context, prompt, one model call, footer, gate, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. Every round ends with exactly one outcome and
reason, recorded in the round store and in one `round.finished` log line.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from backthink.config import Settings
from backthink.context import conversation
from backthink.errors import ModelError, StoreError
from backthink.footer import parse_footer, suppression_reason
from backthink.models import (
    Decision,
    Message,
    ModelMessage,
    ModelReply,
    Outcome,
    RoundRecord,
    RoundState,
    StateReading,
)
from backthink.ports import Clock, MessageStore, ModelClient, RoundStore, StateProvider
from backthink.prompts import PromptBook, render_prompt

log = structlog.get_logger("backthink.round")

# State problems that mean "nobody set up a state file": normal, not worth a note.
_QUIET_STATE_PROBLEMS = frozenset({"state_not_configured", "state_missing"})


@dataclass(frozen=True)
class Request:
    """The exact messages of one model round and what was learned building them."""

    messages: list[ModelMessage]
    state: StateReading
    notes: list[str] = field(default_factory=list)


@dataclass
class _Result:
    outcome: Outcome
    reason: str
    decision: Decision | None = None
    reply: ModelReply | None = None
    channel: str | None = None
    notes: list[str] = field(default_factory=list)


class Thinker:
    """Runs rounds for owners with the ports it is given."""

    def __init__(
        self,
        settings: Settings,
        *,
        messages: MessageStore,
        rounds: RoundStore,
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
        self._state = state
        self._model = model
        self._clock = clock
        self._prompts = prompts
        self._persona_prompt = persona_prompt.strip()
        self._model_missing_hint = model_missing_hint

    async def prepare(self, owner_id: str, trigger: str, *, at: datetime) -> Request:
        """Take the state snapshot and assemble the exact request, calling no model."""
        notes: list[str] = []
        reading = self._state.read(at)
        if reading.problem and reading.problem not in _QUIET_STATE_PROBLEMS:
            notes.append(reading.problem)
        try:
            recent = await self._messages.recent(owner_id, self._settings.prompt.recent_messages)
        except StoreError as exc:
            # The round still thinks without history rather than failing outright.
            notes.append(f"context_unavailable: {exc}")
            recent = []
        messages = self._assemble(recent, trigger, at, reading.state)
        return Request(messages=messages, state=reading, notes=notes)

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

    async def run_round(self, owner_id: str, trigger: str) -> RoundRecord:
        """Run one round now and return its record; never raises except on cancellation."""
        round_id = uuid.uuid4().hex
        started = self._clock.now()
        with structlog.contextvars.bound_contextvars(round_id=round_id, owner_id=owner_id):
            try:
                result = await self._think(owner_id, trigger, started)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("round.crashed")
                result = _Result(Outcome.FAILED, "internal_error")
            record = self._record(round_id, owner_id, trigger, started, result)
            try:
                await self._rounds.save(record)
            except StoreError as exc:
                log.error("round.record_failed", error=str(exc))
            log.info(
                "round.finished",
                trigger=_trigger_for_log(trigger),
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

    async def _think(self, owner_id: str, trigger: str, at: datetime) -> _Result:
        request = await self.prepare(owner_id, trigger, at=at)
        notes = list(request.notes)
        if self._model is None:
            notes.append(self._model_missing_hint)
            return _Result(Outcome.FAILED, "model_error", notes=notes)
        try:
            reply = await self._model.complete(request.messages)
        except ModelError as exc:
            notes.append(str(exc))
            return _Result(Outcome.FAILED, exc.reason, notes=notes)
        decision = parse_footer(reply.text, max_body_chars=self._settings.gate.max_body_chars)
        notes.extend(decision.problems)
        reason = suppression_reason(decision)
        if reason is not None:
            return _Result(Outcome.SUPPRESSED, reason, decision, reply, notes=notes)
        # Delivery needs the push gate; until a route exists nothing may reach the owner.
        return _Result(Outcome.SUPPRESSED, "no_route", decision, reply, notes=notes)

    def _record(
        self, round_id: str, owner_id: str, trigger: str, started: datetime, result: _Result
    ) -> RoundRecord:
        decision, reply = result.decision, result.reply
        return RoundRecord(
            id=round_id,
            owner_id=owner_id,
            trigger=trigger,
            started_at=started,
            finished_at=self._clock.now(),
            outcome=result.outcome,
            reason=result.reason,
            push=decision.push if decision else None,
            urgency=decision.urgency if decision else None,
            decided_channel=decision.channel if decision else None,
            body=decision.body if decision and decision.body else None,
            channel=result.channel,
            model=reply.model if reply else (self._model.model_name if self._model else None),
            prompt_tokens=reply.prompt_tokens if reply else None,
            completion_tokens=reply.completion_tokens if reply else None,
            latency_ms=reply.latency_ms if reply else None,
            raw_reply=reply.text if reply else None,
            notes=result.notes,
        )


def _trigger_for_log(trigger: str) -> str:
    # A poke's text may be private (a calendar title); only named triggers are logged as is.
    named = {"heartbeat", "startup", "cron"}
    key = trigger.strip().lower()
    return key if key in named else "poke"
