"""One round: pre-gate, prompt, model, footer, gate, delivery handoff, record.

`Thinker.run_round(owner_id, trigger)` is the only orchestration of a round;
the scheduler, the command line and the benchmarks all call it, and it does
not know which of them did. Every round ends with exactly one outcome and
reason, recorded by the `Recorder` with one `round.finished` log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from backthink import gate
from backthink.config import Settings
from backthink.delivery import Dispatcher, Handoff
from backthink.echo import reject_echo, reject_prompt_echo
from backthink.errors import ModelError, StoreError, ToolsRefusedError
from backthink.footer import suppression_reason
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
from backthink.ports import Clock, MemoryStore, MessageStore, ModelClient, RoundStore
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
from backthink.structured import parse_reply, reply_thought
from backthink.tools import Tool, ToolBox
from backthink.tools.builtin import RoundContext, builtin_tools
from backthink.tools.loop import LoopResult, Stop, run_tool_loop

log = structlog.get_logger("backthink.round")

# How many of the owner's recent messages and pushes the gate looks at.
OWNER_CHANNEL_LOOKBACK = 20
PUSH_LOOKBACK_SPARE = 4
# The most recent pushes the gate ever reads: enough for a daily cap or an
# unanswered limit up to 30, and a read that stays cheap whatever the settings.
MAX_PUSH_LOOKBACK = 64
# An endpoint that refused tool definitions gets plain rounds this long, then is asked again.
TOOLS_REFUSAL_HOLD = timedelta(days=1)
# An MCP call may take this share of `tools.timeout`; the tool box cuts it off at the whole.
MCP_CALL_SHARE = 0.9
# Marks that belong to an endpoint, not to an owner, are kept under this owner id.
ENDPOINT_MARKS = "*"


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
        rounds: RoundStore | None = None,
        tools: Sequence[Tool] = (),
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
        self._rounds = rounds
        self._extra_tools = list(tools)
        m = settings.model
        endpoint = f"{m.base_url}\n{m.name}".encode()
        self._refusal_mark = "tools_refused:" + hashlib.sha256(endpoint).hexdigest()[:16]
        self._tools_refused_at: datetime | None = None
        self._refusal_read = False

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

    async def offered_tools(self, owner_id: str) -> list[dict[str, Any]]:
        """The tool definitions a round would offer now (MCP servers are asked for theirs).

        Raises:
            StoreError: whether the endpoint refused tools cannot be read.
        """
        if not self._tools_on() or await self._tools_refused():
            return []
        async with AsyncExitStack() as stack:
            box = await self._toolbox(owner_id, "dry-run", stack, [])
            return [spec.definition() for spec in box.specs]

    def _tools_on(self) -> bool:
        t = self._settings.tools
        # A json_schema round offers no tools: its one reply is constrained to the
        # decision object, which leaves no room for a tool call, and the small
        # models that need the constraint seldom use tools well anyway.
        if self._settings.model.output == "json_schema":
            return False
        return t.enabled and t.max_steps > 0 and t.max_calls > 0

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
                # What the round has learned so far, so a round cut off still says it.
                progress = Ending(Outcome.FAILED, Reason.INTERRUPTED)
                try:
                    ending = await self._think(start, progress)
                except asyncio.CancelledError:
                    progress.notes.append(INTERRUPTED_NOTE)
                    if slot is not None:
                        progress.notes.insert(0, slot)
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
                # Tool calls made and memories shown before the round ended stay on its
                # record, however it ended.
                ending.tools = ending.tools or progress.tools
                ending.recalled = ending.recalled or progress.recalled
            if slot is not None:
                ending.notes.insert(0, slot)
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
        last_owner_at = _latest_credible(view, start.started)
        skip = gate.pre_gate(
            settings=g,
            tz=tz,
            connected=self.connected(),
            last_owner_message_at=last_owner_at,
            at=start.started,
        )
        if skip is not None:
            return Ending(skip.outcome, skip.reason)

        memory = await self._recollect(start.owner_id, view.recent)
        request = self._requests.build(view.recent, start.trigger, start.started, memory=memory)
        progress.recalled = request.recalled
        notes = progress.notes
        notes.extend(request.notes)
        if self._model is None:
            return Ending(
                Outcome.FAILED, Reason.MODEL_ERROR, notes=[*notes, self._model_missing_hint]
            )
        asked = LoopResult(reply=None, uses=progress.tools)
        try:
            await self._ask(start, request, last_owner_at, asked, notes)
        except ModelError as exc:
            return Ending(Outcome.FAILED, exc.reason, notes=[*notes, str(exc)], tools=asked.uses)
        reply = asked.reply
        assert reply is not None  # _ask returns only with a reply
        progress.reply = reply
        notes.extend(reply.notes)
        await self._keep_thought(start, reply, notes)
        if asked.stop is not None:
            stopped = Reason.TOOL_LIMIT if asked.stop is Stop.TOOL_LIMIT else Reason.OWNER_ACTIVE
            return Ending(Outcome.SUPPRESSED, stopped, reply=reply, notes=notes, tools=asked.uses)

        decision = parse_reply(
            reply.text, output=self._settings.model.output, max_body_chars=g.max_body_chars
        )
        decision = reject_echo(decision, [*request.untrusted(), *asked.results])
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

    async def _ask(
        self,
        start: RoundStart,
        request: Request,
        seen_owner_at: datetime | None,
        result: LoopResult,
        notes: list[str],
    ) -> None:
        """Get the round's final reply into `result`: one plain call, or the bounded tool loop.

        Raises:
            ModelError: the endpoint failed (a refusal of tools is answered with a plain call).
        """
        assert self._model is not None
        t = self._settings.tools
        if not self._tools_on() or await self._tools_refused():
            result.reply = await self._model.complete(request.messages)
            return
        async with AsyncExitStack() as stack:
            box = await self._toolbox(start.owner_id, start.id, stack, notes)

            async def owner_spoke() -> bool:
                return await self._owner_spoke(start, seen_owner_at)

            try:
                await run_tool_loop(
                    self._model,
                    request.messages,
                    box,
                    result,
                    max_steps=t.max_steps,
                    max_calls=t.max_calls,
                    owner_spoke=owner_spoke,
                )
            except ToolsRefusedError as exc:
                log.warning("round.tools_refused")
                await self._refuse_tools(start.started)
                notes.append(f"tools_refused: {exc}; plain rounds for a day")
                result.reply = await self._model.complete(request.messages)
            finally:
                notes.extend(box.notes)

    async def _toolbox(
        self, owner_id: str, round_id: str, stack: AsyncExitStack, notes: list[str]
    ) -> ToolBox:
        """The built-in tools and those of the configured MCP servers, for one round."""
        t = self._settings.tools
        names: list[str] = []
        context = RoundContext(
            owner_id=owner_id,
            round_id=round_id,
            tz=self._settings.owner.tz,
            clock=self._clock.now,
            channels=self.connected,
            configured_channels=list(self._settings.channels),
        )
        tools: list[Tool] = []
        if self._rounds is not None:
            tools += builtin_tools(self._memories, self._rounds, context, lambda: names)
        tools += self._extra_tools
        if t.mcp:
            # Imported only when configured: the SDK is a large import the idle daemon skips.
            from backthink.tools.mcp import open_mcp_tools

            spill = self._settings.database.spill_path
            served, problems = await open_mcp_tools(
                t.mcp,
                stack=stack,
                timeout_s=t.timeout.total_seconds(),
                # A little under the tool box's own bound, so the server's clearer
                # "no answer within" reaches the model first.
                call_timeout_s=t.timeout.total_seconds() * MCP_CALL_SHARE,
                errlog_dir=spill.parent if spill is not None else None,
            )
            tools += served
            notes.extend(problems)
        names.extend(tool.spec.name for tool in tools)
        return ToolBox(
            tools, timeout_s=t.timeout.total_seconds(), max_result_chars=t.max_result_chars
        )

    async def _owner_spoke(self, start: RoundStart, seen: datetime | None) -> bool:
        """Whether the owner wrote in the main session since the round read its history."""
        activity = await self._messages.owner_activity(start.owner_id, messages=1, pushes=0)
        if not activity.owner_messages:
            return False
        latest = activity.owner_messages[0][1]
        if latest > self._clock.now() + FUTURE_SKEW:
            return False  # mis-dated: no sign of anyone writing now
        return seen is None or latest > seen

    async def _tools_refused(self) -> bool:
        """Whether this endpoint and model refused tools less than `TOOLS_REFUSAL_HOLD` ago."""
        if not self._refusal_read and self._rounds is not None:
            self._refusal_read = True
            self._tools_refused_at = await self._rounds.marked_at(
                ENDPOINT_MARKS, self._refusal_mark
            )
        at = self._tools_refused_at
        return at is not None and self._clock.now() - at < TOOLS_REFUSAL_HOLD

    async def _refuse_tools(self, at: datetime) -> None:
        self._tools_refused_at = at
        if self._rounds is not None:
            await self._rounds.mark(ENDPOINT_MARKS, self._refusal_mark, at)

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
        text = reply_thought(
            reply.text, output=self._settings.model.output, max_chars=m.thought_chars
        )
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


SLOT_NOTE = "scheduled for "


def slot_note(scheduled_for: datetime, started: datetime) -> str:
    """The note of a queued round: its slot (UTC, ISO 8601) and how late it began."""
    late = max(0.0, (started - scheduled_for).total_seconds())
    return f"{SLOT_NOTE}{scheduled_for.astimezone(UTC).isoformat()}, began {late:.1f} s later"


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
