"""The relay's bookkeeping: what each relayed call adds to the session, and what each owner used.

A call begins by planning its turn against the session's newest messages
(`backthink.api.turns`), marking superseded what an edit left behind and
storing the new user messages before the upstream is asked: a daemon killed
during the call keeps the owner's question, and a round that starts
meanwhile sees the owner active. It ends, once, with the upstream's outcome.
Then its reply is kept: appended, or put in place of the reply a regenerated
turn had, and only when the turn's question is in the session (a reply
without its question would answer nothing). One owner's writes run in order,
each call waiting for the previous one's, so a turn always finds the turns
before it. A front-end's task (`kind=task`) touches no session: it is only
counted and logged.

Each call leaves one `relay.finished` line, written once its writes are
done, so the counts it gives are what was stored, with the owner's turns
still in flight and how many were beside it when it began (`parallel`).
Messages are never logged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from backthink.api.incoming import incoming
from backthink.api.turns import RELAY_CHAT, Ids, Turn, plan
from backthink.api.upstream import Completion
from backthink.errors import BackthinkError, StoreError
from backthink.host.fleet import Fleet
from backthink.host.turns import RelayTurn
from backthink.models import Message

log = structlog.get_logger(__name__)

SESSION_TAIL = 30  # newest session messages a turn is matched against, at least
SESSION_ROOM = 20  # more than the request's messages read, for pushes and other chats between
SESSION_MAX = 200  # newest session messages a turn is matched against, at most
CHAT_ID_HEX = 16  # hex digits of the chat ids the relay gives chats that name none
Kept = Literal["appended", "replaced", "skipped"]
GONE = "the client went away"  # a call's error when its client left: no failure of the upstream


@dataclass
class Usage:
    """What one owner's front-ends asked of the upstream through the relay."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unmetered: int = 0
    """Answers that gave no token counts (streamed ones whose client did not ask for them)."""

    def to_json(self) -> dict[str, int]:
        """`{"requests", "prompt_tokens", "completion_tokens", "unmetered"}`."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "unmetered": self.unmetered,
        }


@dataclass
class Call:
    """One relayed call, from its plan to its end."""

    owner_id: str
    turn: Turn
    speaker: str
    started: float
    """`time.perf_counter()` when the request came in."""
    storing: asyncio.Task[bool] | None
    """Stores the turn's new user messages; True once they are in the session (None: a task)."""
    task: str | None = None
    """The front-end task the call is, by name (None: a turn of the conversation)."""
    chat_id: str | None = None
    """The chat the turn's messages (and reply) belong to."""
    finished: bool = field(default=False, init=False)
    live: RelayTurn | None = field(default=None, init=False)
    """The turn among the owner's live turns, ended when the call ends."""


class Ledger:
    """Plans and keeps every owner's relayed turns, and counts what each owner used."""

    def __init__(self, fleet: Fleet) -> None:
        """Keep turns in the fleet's sessions."""
        self._fleet = fleet
        self._session = fleet.session
        self._turns: dict[str, asyncio.Lock] = {}
        # Per owner, the latest session write: the next turn (and reply) waits for it.
        self._writing: dict[str, asyncio.Task[Any]] = {}
        self._usage: dict[str, Usage] = {}

    def usage(self, owner_id: str) -> Usage:
        """The owner's requests and tokens through the relay since the daemon started."""
        return self._usage.get(owner_id, Usage())

    async def settled(self) -> None:
        """Wait until the session writes under way (turns and replies) are done."""
        while pending := [t for t in self._writing.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    def begin_task(self, owner_id: str, name: str, *, started: float) -> Call:
        """Count a front-end's task; it reads and stores nothing."""
        self._usage.setdefault(owner_id, Usage()).requests += 1
        return Call(owner_id, Turn([]), "", started, None, task=name)

    async def begin(
        self, owner_id: str, messages: list[Any], *, started: float, ids: Ids | None = None
    ) -> Call:
        """Plan the turn against the session and store its new messages.

        Raises:
            Refusal: a new message is beyond what `messages import` accepts (400).
            StoreError: the session cannot be read.
        """
        lock = self._turns.setdefault(owner_id, asyncio.Lock())
        async with lock:
            previous = self._writing.get(owner_id)
            if previous is not None:
                # The previous turn's messages go first, or this turn would not find them.
                await asyncio.gather(previous, return_exceptions=True)
            limit = min(max(len(messages) + SESSION_ROOM, SESSION_TAIL), SESSION_MAX)
            tail = await self._session.recent(owner_id, limit=limit)
            turn = plan(messages, tail, ids)
            chat_id = turn.chat_id
            if turn.new_chat:
                chat_id = f"{RELAY_CHAT}{uuid.uuid4().hex[:CHAT_ID_HEX]}"
            app = await self._fleet.app(owner_id)
            now = app.clock.now()
            new = [
                incoming(
                    {"role": "user", "text": s.text, "image": s.image},
                    where=f"messages[{s.index}]",
                    owner_id=owner_id,
                    settings=app.settings,
                    now=now,
                ).model_copy(update={"chat_id": chat_id})
                for s in turn.new
            ]
            if new and turn.client_id:
                new[-1] = new[-1].model_copy(update={"client_id": turn.client_id})
            storing = asyncio.create_task(self._store(owner_id, new, turn.superseded))
            self._writing[owner_id] = storing
        # Stored before the upstream is asked; shielded, so a client gone meanwhile
        # still leaves the question in the session.
        await asyncio.shield(storing)
        self._usage.setdefault(owner_id, Usage()).requests += 1
        speaker = app.settings.persona.id
        return Call(owner_id, turn, speaker, started, storing, chat_id=chat_id)

    def finish(
        self,
        call: Call,
        completion: Completion | None,
        *,
        status: int | None,
        stream: bool = False,
        error: str | None = None,
    ) -> None:
        """Record how the call ended, once: count its tokens, keep its reply, log it.

        `status` None: the upstream could not be reached; `error` says what
        broke a call (a stream cut off, a timeout).
        """
        if call.finished:
            return
        call.finished = True
        if call.live is not None:
            call.live.end()
        latency_ms = round((time.perf_counter() - call.started) * 1000, 1)
        counts = self._usage.setdefault(call.owner_id, Usage())
        if completion is not None and completion.prompt_tokens is not None:
            counts.prompt_tokens += completion.prompt_tokens
            counts.completion_tokens += completion.completion_tokens or 0
        elif status == 200:
            counts.unmetered += 1
        reply = None
        if completion is not None and completion.complete and completion.text.strip():
            reply = completion.text
        outcome = {
            "status": status,
            "stream": stream,
            "error": error,
            "prompt_tokens": completion.prompt_tokens if completion else None,
            "completion_tokens": completion.completion_tokens if completion else None,
            "latency_ms": latency_ms,
        }
        failure = None if not _failed(outcome) else (error or f"the upstream answered {status}")
        self._fleet.turns.relay_ended(call.owner_id, failure)
        if call.storing is None:
            # A task wrote nothing, so no turn waits for it: it is logged now.
            (log.warning if _failed(outcome) else log.info)(
                "relay.finished", owner_id=call.owner_id, kind="task", task=call.task, **outcome
            )
            return
        task = asyncio.create_task(self._keep(call, reply, outcome))
        self._writing[call.owner_id] = task

    async def _store(
        self, owner_id: str, messages: list[Message], superseded: list[int] | None = None
    ) -> bool:
        """Mark what the turn left behind, store its new messages; False (logged) on a refusal."""
        try:
            if superseded:
                await self._session.supersede(owner_id, superseded)
            if messages:
                await self._session.append(messages)
        except StoreError as exc:
            log.warning("relay.not_stored", owner_id=owner_id, error=str(exc))
            return False
        return True

    async def _keep(self, call: Call, reply: str | None, outcome: dict[str, Any]) -> None:
        """Once the turn is stored, keep the reply (if its question is there); log the call."""
        assert call.storing is not None, "a task keeps nothing"
        done = await asyncio.gather(call.storing, return_exceptions=True)
        stored = done[0] is True
        kept: Kept | None = None
        if reply is not None:
            kept = await self._keep_reply(call, reply) if stored else "skipped"
        (log.warning if _failed(outcome) else log.info)(
            "relay.finished",
            owner_id=call.owner_id,
            kind="turn",
            stored=len(call.turn.new) if stored else 0,
            superseded=len(call.turn.superseded) if stored else 0,
            pushes=len(call.turn.pushes),
            reply=kept,
            parallel=len(call.live.alongside) if call.live is not None else 0,
            turns_in_flight=self._fleet.turns.in_flight(call.owner_id).to_json(),
            **outcome,
        )

    async def _keep_reply(self, call: Call, reply: str) -> Kept:
        """Append the reply, or put it in place of the one a regenerated turn had."""
        try:
            old = call.turn.replaces
            if old is not None and old.message.id is not None:
                if await self._session.revise(call.owner_id, old.message.id, reply):
                    return "replaced"
            app = await self._fleet.app(call.owner_id)
            message = Message(
                owner_id=call.owner_id,
                role="assistant",
                text=reply,
                speaker=call.speaker,
                created_at=app.clock.now(),
                chat_id=call.chat_id,
            )
            await self._session.append([message])
        except BackthinkError as exc:
            log.warning("relay.reply_not_stored", owner_id=call.owner_id, error=str(exc))
            return "skipped"
        return "appended"


def _failed(outcome: dict[str, Any]) -> bool:
    """Whether the upstream failed a call: unreachable, late, broke off, or a server error.

    Such a call is the owner's chat failing: its line is a warning, so it
    stands out of the log.
    """
    status, error = outcome.get("status"), outcome.get("error")
    return status is None or status >= 500 or error not in (None, GONE)
