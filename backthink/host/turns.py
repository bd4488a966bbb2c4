"""The live turns of every owner in this process: rounds one at a time, relay turns beside them.

Heartbeat, boot, cron and poke rounds and relay turns of one owner are turns
of one conversation. The fleet keeps one `LiveTurns` for the process and
hands it to every owner's round and to the relay, so it outlives the owner's
app (rebuilt when the owner's row changes):

- a round holds its owner while it runs; a second round of the owner meets
  the hold and ends `skipped/busy`. On PostgreSQL the hold is also the
  owner's advisory lock (`backthink.store.turn_locks`), so rounds of one
  owner never overlap whichever processes (daemon, workers, `think`) host
  them;
- a relay turn is registered from its arrival to its end, with how far it
  got; it sees the owner's other relay turns in flight when it starts (the
  parallel notice, `backthink.api.parallel`), and a round of the owner that
  meets one, or one begun since the round took its hold, yields; so does a
  round during which the owner's message came in over the API.

Nothing here holds a message's text: only ids, stages, counts and tool names.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from backthink.store.turn_locks import RoundLocks

MAX_TOOLS = 8  # tool names kept per relay turn (the first ones)
LAST_ERROR_CHARS = 300  # characters of a relay call's last failure kept for status
MAX_NAME_CHARS = 64  # a tool name longer than this is no name: it is not kept


class Stage(StrEnum):
    """How far a relay turn got."""

    QUEUED = "queued"
    """Arrived; its question is being stored, the upstream not asked yet."""
    WAITING = "waiting"
    """The upstream is asked; nothing of its answer has come."""
    STREAMING = "streaming"
    """The upstream's answer is streaming."""


@dataclass(frozen=True)
class TurnView:
    """Another relay turn as a turn starting beside it sees it: metadata, never text."""

    client_id: str | None
    stage: Stage
    chars: int
    tools: tuple[str, ...]


@dataclass(frozen=True)
class InFlight:
    """An owner's turns in flight in this process."""

    rounds: int = 0
    relay: int = 0

    def to_json(self) -> dict[str, int]:
        """`{"rounds": N, "relay": N}`."""
        return {"rounds": self.rounds, "relay": self.relay}


@dataclass
class _Owner:
    """One owner's live turns; dropped once none is left."""

    round: _RoundHold | None = None
    relay: dict[int, RelayTurn] = field(default_factory=dict)
    begun: int = 0
    """The owner's turns begun so far (relay turns, messages handed in): a round compares it
    with what it saw at its hold."""


class _RoundHold:
    """A round's hold on its owner (`backthink.ports.RoundTurn`)."""

    def __init__(self, owner: _Owner) -> None:
        self._owner = owner
        self._seen = owner.begun

    def overtaken(self) -> bool:
        """Whether a relay turn of the owner is under way, or began since the hold."""
        return bool(self._owner.relay) or self._owner.begun != self._seen


class RelayTurn:
    """One relay turn in flight: its client message id, how far it got, the tools it called."""

    def __init__(
        self, registry: LiveTurns, owner_id: str, number: int, client_id: str | None
    ) -> None:
        self._registry = registry
        self.owner_id = owner_id
        self.number = number
        self.client_id = client_id
        self.stage = Stage.QUEUED
        self.chars = 0
        self.tools: list[str] = []
        self._streamed_tools = 0
        self.alongside: tuple[TurnView, ...] = ()
        """The owner's other relay turns in flight when this one arrived, oldest first."""
        self.ended = False

    def called(self, names: Sequence[str]) -> None:
        """Note tools this turn called (the first MAX_TOOLS distinct names are kept)."""
        for name in names:
            if len(self.tools) >= MAX_TOOLS:
                return
            if 0 < len(name) <= MAX_NAME_CHARS and name not in self.tools:
                self.tools.append(name)

    def asking(self) -> None:
        """The upstream is being asked."""
        self.stage = Stage.WAITING

    def streamed(self, chars: int, tools: Sequence[str] = ()) -> None:
        """The upstream's answer is streaming: `chars` characters and `tools` called so far."""
        self.stage = Stage.STREAMING
        self.chars = chars
        if len(tools) > self._streamed_tools:
            self.called(tools[self._streamed_tools :])
            self._streamed_tools = len(tools)

    def view(self) -> TurnView:
        """What a turn starting now is told of this one."""
        return TurnView(self.client_id, self.stage, self.chars, tuple(self.tools))

    def end(self) -> None:
        """The turn is over (answered, failed or abandoned); a second call does nothing."""
        if not self.ended:
            self.ended = True
            self._registry._end_relay(self)


class LiveTurns:
    """Every owner's live turns in this process, and on PostgreSQL the owners' round locks."""

    def __init__(self, locks: RoundLocks | None = None) -> None:
        """Keep turns in this process; with `locks`, a round also holds its owner's lock."""
        self._locks = locks
        self._owners: dict[str, _Owner] = {}
        self._numbers = itertools.count(1)
        # Per owner: relay calls ended, how many failed, and the last failure's words.
        self._relay_ends: dict[str, tuple[int, int, str | None]] = {}

    @asynccontextmanager
    async def round(self, owner_id: str) -> AsyncIterator[_RoundHold | None]:
        """Hold the owner's round for the block; None inside when another round holds it.

        Raises:
            StoreError: the owner's lock on PostgreSQL cannot be taken.
        """
        owner = self._owners.setdefault(owner_id, _Owner())
        if owner.round is not None:
            yield None
            return
        hold = owner.round = _RoundHold(owner)
        taken = False
        try:
            taken = self._locks is None or await self._locks.take(owner_id)
            yield hold if taken else None
        finally:
            try:
                if taken and self._locks is not None:
                    # Shielded: a cancelled round still lets go of its lock, or the owner
                    # would stay locked for the life of this process.
                    await asyncio.shield(self._locks.give_back(owner_id))
            finally:
                owner.round = None
                self._forget(owner_id, owner)

    def relay_ended(self, owner_id: str, error: str | None) -> None:
        """Count a relay call of the owner that ended; `error` says why it failed, if it did."""
        calls, failed, last = self._relay_ends.get(owner_id, (0, 0, None))
        if error is None:
            self._relay_ends[owner_id] = (calls + 1, failed, last)
        else:
            self._relay_ends[owner_id] = (calls + 1, failed + 1, error[:LAST_ERROR_CHARS])

    def relay_summary(self, owner_id: str) -> dict[str, Any]:
        """The owner's relay calls since the process began: how many, how many failed, why."""
        calls, failed, last = self._relay_ends.get(owner_id, (0, 0, None))
        return {"calls": calls, "failed": failed, "last_error": last}

    def relay(self, owner_id: str, client_id: str | None) -> RelayTurn:
        """Register a relay turn as it arrives; it sees the others in flight (`alongside`)."""
        owner = self._owners.setdefault(owner_id, _Owner())
        turn = RelayTurn(self, owner_id, next(self._numbers), client_id)
        turn.alongside = tuple(t.view() for t in owner.relay.values())
        owner.relay[turn.number] = turn
        owner.begun += 1
        return turn

    def spoke(self, owner_id: str) -> None:
        """The owner's own message came in (not through the relay): a round under way yields."""
        owner = self._owners.get(owner_id)
        if owner is not None:
            owner.begun += 1

    def in_flight(self, owner_id: str) -> InFlight:
        """The owner's rounds and relay turns in flight in this process."""
        owner = self._owners.get(owner_id)
        if owner is None:
            return InFlight()
        return InFlight(rounds=int(owner.round is not None), relay=len(owner.relay))

    def _end_relay(self, turn: RelayTurn) -> None:
        owner = self._owners.get(turn.owner_id)
        if owner is not None:
            owner.relay.pop(turn.number, None)
            self._forget(turn.owner_id, owner)

    def _forget(self, owner_id: str, owner: _Owner) -> None:
        """Drop an owner with nothing in flight, so the registry stays as small as the traffic."""
        if owner.round is None and not owner.relay and self._owners.get(owner_id) is owner:
            del self._owners[owner_id]
