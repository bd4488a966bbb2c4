"""The steps of a round between its start and its record, each returning a frozen value.

In order: the pause, whether there is a model, the pre-gate and the request
(`Prepared`), the model step (`Asked`), the reply read with both echo guards
(`Read`), the gate (`Judged`), the hand-over (a `DeliveryResult`).
`Steps.run` writes each value into the round's trail as it returns and says
how the round left (an `Exit`); a database that fails raises, and `Thinker`
records every way out alike. The dry run builds its request on the same
path as a round (`Steps.request`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from backthink.config import Settings
from backthink.decision import gate
from backthink.decision.echo import reject_echo, reject_prompt_echo
from backthink.decision.failsafe import suppression_reason
from backthink.decision.reply import read_reply
from backthink.delivery.dispatcher import DeliveryResult, Dispatcher, Handoff
from backthink.memory.recollect import keep_thought, recollect
from backthink.models import Decision, Outcome, Reason, SessionView
from backthink.ports import Clock, MemoryStore, MessageStore, ModelClient, RoundStore
from backthink.round.ask import Asked, Errored, Replied, Stopped, ask
from backthink.round.history import gate_history, latest_credible, owner_spoke
from backthink.round.pause import Pauses
from backthink.round.recorder import RoundStart
from backthink.round.request import Request, RequestBuilder
from backthink.round.stages import Exit, Judged, Prepared, Read, Trail
from backthink.round.unchanged import UnchangedBeats, asks_every_time
from backthink.tools.loop import Stop
from backthink.tools.offer import ToolOffer

STOPPED = {Stop.TOOL_LIMIT: Reason.TOOL_LIMIT, Stop.OWNER_ACTIVE: Reason.OWNER_ACTIVE}
"""The reason of a round whose model step stopped short of a reply."""
OVERTAKEN_NOTE = "the owner began a turn of their own (a chat reply is under way)"


def _never() -> bool:
    return False


class Steps:
    """A round's steps for one owner's app, with the ports they read and write."""

    def __init__(
        self,
        settings: Settings,
        *,
        messages: MessageStore,
        requests: RequestBuilder,
        model: ModelClient | None,
        delivery: Dispatcher,
        clock: Clock,
        offer: ToolOffer,
        memories: MemoryStore | None,
        pauses: Pauses | None,
        rounds: RoundStore | None,
        model_missing_hint: str,
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._requests = requests
        self._model = model
        self._delivery = delivery
        self._clock = clock
        self._offer = offer
        self._memories = memories
        self._pauses = pauses
        self._model_missing_hint = model_missing_hint
        self._beats = UnchangedBeats(settings, memories=memories, rounds=rounds)

    async def run(
        self, start: RoundStart, trail: Trail, *, overtaken: Callable[[], bool] = _never
    ) -> Exit:
        """Each step in turn, its value written into `trail` as it returns; the way the round left.

        `overtaken` says whether the owner began a turn of their own since the
        round began: asked before the model call (the round skips) and before
        the hand-over (it stays silent).

        Raises:
            StoreError: a read or the delivery's commit failed.
        """
        paused = await self._paused(start)
        if paused is not None:
            return paused
        model = self._model
        if model is None:
            # Nothing to think with: nothing is read or spent, and the round says how to fix it.
            return Exit(Outcome.SKIPPED, Reason.NO_MODEL, self._model_missing_hint)
        prepared = await self._pre_gate(start)
        if isinstance(prepared, Exit):
            return prepared
        if overtaken():
            return Exit(Outcome.SKIPPED, Reason.OWNER_ACTIVE, OVERTAKEN_NOTE)
        trail.prepared = prepared
        asked = await self._ask(model, start, prepared, trail)
        trail.asked = asked
        end = asked.end
        if isinstance(end, Errored):
            return Exit(Outcome.FAILED, end.error.reason, str(end.error))
        read = await self._read(start, prepared, asked, end)
        trail.read = read
        if read.suppressed is not None:
            return Exit(Outcome.SUPPRESSED, read.suppressed)
        judged = await self._judge(start, prepared, read.decision)
        trail.judged = judged
        verdict = judged.verdict
        if not verdict.deliver or verdict.channel is None:
            return Exit(verdict.outcome, verdict.reason)
        if overtaken():
            return Exit(Outcome.SUPPRESSED, Reason.OWNER_ACTIVE, OVERTAKEN_NOTE)
        sent = await self._hand_over(start, read.decision, judged, verdict.channel)
        trail.delivered = sent
        if not sent.sent:
            return Exit(Outcome.FAILED, Reason.DELIVERY_FAILED)
        return Exit(Outcome.DELIVERED, sent.channel or verdict.channel)

    async def request(self, owner_id: str, trigger: str, at: datetime) -> Request:
        """The exact request a round would send at `at`, built as a round builds it.

        Raises:
            StoreError: the history cannot be read.
        """
        return await self._build(owner_id, trigger, await self._view(owner_id), at)

    async def _paused(self, start: RoundStart) -> Exit | None:
        """`skipped/disabled` while the owner's rounds are paused; checked before anything else.

        Raises:
            StoreError: the pause cannot be read.
        """
        if self._pauses is None:
            return None
        pause = await self._pauses.state(start.owner_id, start.started)
        if not pause.paused:
            return None
        return Exit(Outcome.SKIPPED, Reason.DISABLED, pause.describe(self._settings.owner.tz))

    async def _pre_gate(self, start: RoundStart) -> Prepared | Exit:
        """The checks before the model call, then the request; an Exit when the round skips.

        Raises:
            StoreError: the history cannot be read: a round that cannot be
                gated or recorded spends no tokens.
        """
        # One read serves the pre-gate and the context.
        view = await self._view(start.owner_id)
        last_owner_at = latest_credible(view, start.started)
        # Which channels are down is shared with every process: read it before choosing.
        await self._delivery.refresh()
        skip = gate.pre_gate(
            settings=self._settings.gate,
            tz=self._settings.owner.tz,
            connected=self._delivery.connected(),
            last_owner_message_at=last_owner_at,
            at=start.started,
            owner_channels=[m.channel for m in reversed(view.recent) if m.role == "user"],
            session_channel=self._delivery.session_channel,
        )
        if skip is not None:
            return Exit(skip.outcome, skip.reason)
        request = await self._build(start.owner_id, start.trigger, view, start.started)
        digest = self._beats.digest(request, start.started)
        same = await self._beats.same_as_before(
            digest, start.trigger, start.owner_id, start.started
        )
        if same is not None:
            note = f"nothing new since round {same.id[:12]}, which stayed silent"
            return Exit(Outcome.SKIPPED, Reason.UNCHANGED, note)
        return Prepared(request, digest, last_owner_at)

    async def _view(self, owner_id: str) -> SessionView:
        """The owner's recent main-session messages, as a round reads them.

        Raises:
            StoreError: the history cannot be read.
        """
        return await self._messages.session_view(owner_id, self._settings.prompt.recent_messages)

    async def _build(self, owner_id: str, trigger: str, view: SessionView, at: datetime) -> Request:
        """The request a round sends at `at`, with the memory its window recalls.

        The one path to a request: the dry run shows what a round would send
        because both build it here.
        """
        memory = await recollect(self._memories, self._settings.memory, owner_id, view.recent)
        return self._requests.build(view.recent, trigger, at, memory=memory)

    async def _ask(
        self, model: ModelClient, start: RoundStart, prepared: Prepared, trail: Trail
    ) -> Asked:
        """The model step; each tool call it makes lands on `trail` as it ends."""
        return await ask(
            model,
            prepared.request,
            self._offer,
            self._settings.tools,
            owner_id=start.owner_id,
            round_id=start.id,
            started=start.started,
            owner_spoke=lambda: owner_spoke(
                self._messages,
                start.owner_id,
                since=prepared.last_owner_at,
                now=self._clock.now(),
            ),
            on_use=trail.uses.append,
            max_chars=self._settings.prompt.max_chars,
        )

    async def _read(
        self, start: RoundStart, prepared: Prepared, asked: Asked, end: Replied | Stopped
    ) -> Read:
        """Read the reply once, keep its thought, and guard its decision against echoes.

        A heartbeat that stays silent also notes what the next one will ask.
        """
        request = prepared.request
        read = read_reply(
            end.reply.text,
            output=self._settings.model.output,
            max_body_chars=self._settings.gate.max_body_chars,
        )
        # Every outside text the round saw, gathered once for the thought and the echo guard.
        outside = [*request.untrusted(), *asked.results]
        kept = await keep_thought(
            self._memories,
            owner_id=start.owner_id,
            round_id=start.id,
            at=start.started,
            text=read.journal_thought(self._settings.memory.thought_chars),
            outside=outside,
        )
        decision = reject_prompt_echo(reject_echo(read.decision, outside), request.prompt)
        if isinstance(end, Stopped):
            return Read(decision, stop=end.stop, suppressed=STOPPED[end.stop], kept=kept)
        reason = suppression_reason(decision)
        silent = reason is Reason.NO_PUSH and not asks_every_time(start.trigger)
        next_digest = (
            await self._beats.silent_digest(request, start.owner_id, start.started)
            if silent
            else None
        )
        return Read(decision, suppressed=reason, kept=kept, next_digest=next_digest)

    async def _judge(self, start: RoundStart, prepared: Prepared, decision: Decision) -> Judged:
        """The gate's verdict on the round's push, judged on the owner's history read now.

        Raises:
            StoreError: the history cannot be read.
        """
        at = self._clock.now()
        history = await gate_history(self._messages, start.owner_id, self._settings.gate, at)
        verdict = gate.evaluate(
            decision,
            state=prepared.request.state.state,
            history=history.gate,
            connected=self._delivery.connected(),
            session_channel=self._delivery.session_channel,
            settings=self._settings.gate,
            tz=self._settings.owner.tz,
            started_at=start.started,
            at=at,
        )
        future = (gate.FUTURE_OWNER_MESSAGE_NOTE,) if history.ignored_future else ()
        return Judged(verdict, at, (*future, *verdict.notes))

    async def _hand_over(
        self, start: RoundStart, decision: Decision, judged: Judged, channel: str
    ) -> DeliveryResult:
        """Hand the push to the dispatcher on the channel the gate chose.

        Raises:
            StoreError: the delivery could not be committed; nothing was sent.
        """
        return await self._delivery.hand_over(
            Handoff(
                start.id,
                start.owner_id,
                start.trigger,
                decision,
                channel,
                judged.at,
                fallbacks=judged.verdict.fallbacks,
            )
        )
