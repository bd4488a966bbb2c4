"""Fakes for tests and benchmarks: a settable clock, a scripted model, static state.

They implement the same ports as the real adapters, so a round built from
them behaves exactly like a production round minus the I/O.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from backthink.clock import ManualClock
from backthink.config import Settings
from backthink.delivery.dispatcher import Dispatcher
from backthink.errors import DeliveryError, ModelError
from backthink.host.app import AppOverrides, build_app
from backthink.models import Message, RoundState, StateReading
from backthink.ports import Channel, MemoryStore, MessageStore, ModelClient
from backthink.records import ModelMessage, ModelReply, OutgoingMessage, ToolCall
from backthink.round.thinker import Thinker
from backthink.store import VolatileStores
from backthink.store.marks import VolatileMarks
from backthink.store.volatile import VolatileMessageStore, VolatileOutbox, VolatileRoundStore
from backthink.store.volatile_memories import VolatileMemoryStore
from backthink.tools import Tool

__all__ = [
    "Calls",
    "FailingModel",
    "FakeClock",
    "RecordingChannel",
    "Rig",
    "ScriptedModel",
    "StaticState",
    "VolatileMessageStore",
    "VolatileOutbox",
    "VolatileRoundStore",
    "VolatileStores",
    "make_rig",
    "proactive_messages",
    "run_cli",
    "seed_history",
]


# How far back `proactive_messages` looks: tests keep short histories.
PROACTIVE_SCAN = 1000


# Where a FakeClock stands when a test names no instant.
FAKE_START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


class FakeClock(ManualClock):
    """The manual clock, standing at `FAKE_START` unless told otherwise."""

    def __init__(self, start: datetime | None = None) -> None:
        """Stand at `start`, an aware instant, or at `FAKE_START`."""
        super().__init__(start or FAKE_START)


@dataclass(frozen=True)
class Calls:
    """A scripted reply that asks for tools: (name, arguments) pairs, with optional text.

    Arguments given as a string are sent as written (so a test can send broken JSON).
    """

    calls: Sequence[tuple[str, Mapping[str, object] | str]]
    text: str = ""

    def reply(self, model: str, turn: int) -> ModelReply:
        """The ModelReply of this entry; call ids are unique per turn."""
        return ModelReply(
            text=self.text,
            tool_calls=[
                ToolCall(
                    id=f"call_{turn}_{i}",
                    name=name,
                    arguments=args if isinstance(args, str) else json.dumps(args),
                )
                for i, (name, args) in enumerate(self.calls)
            ],
            model=model,
            prompt_tokens=10,
            completion_tokens=5,
            latency_ms=0.0,
        )


class ScriptedModel:
    """A model that answers from a script and records every request.

    Each script entry is a reply text, a `Calls` (a reply asking for tools), or
    an exception to raise. A call with nothing left in the script fails the
    test loudly instead of inventing a reply. `offered` keeps the tool names
    each call offered.
    """

    def __init__(self, *script: str | Calls | Exception, name: str = "scripted") -> None:
        self._script = list(script)
        self._name = name
        self.calls: list[list[ModelMessage]] = []
        self.offered: list[list[str]] = []

    @property
    def model_name(self) -> str:
        """The model name recorded with rounds."""
        return self._name

    def push(self, *entries: str | Calls | Exception) -> None:
        """Append replies to the script."""
        self._script.extend(entries)

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """Return (or raise) the next scripted entry."""
        self.calls.append(list(messages))
        self.offered.append([tool["function"]["name"] for tool in tools])
        if not self._script:
            raise AssertionError(f"unexpected model call #{len(self.calls)}: the script is empty")
        entry = self._script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        if isinstance(entry, Calls):
            return entry.reply(self._name, len(self.calls))
        prompt = sum(len(m.text) for m in messages) // 4
        return ModelReply(
            text=entry,
            model=self._name,
            prompt_tokens=prompt,
            completion_tokens=len(entry) // 4,
            latency_ms=0.0,
        )

    async def probe(self) -> str:
        """A scripted model always answers."""
        return f"scripted model {self._name!r}"

    def assert_complete(self) -> None:
        """Fail when scripted replies were never asked for."""
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted replies were never used")


class FailingModel(ScriptedModel):
    """A model whose every call raises the given error."""

    def __init__(self, error: ModelError) -> None:
        super().__init__()
        self._error = error

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """Record the call and raise."""
        self.calls.append(list(messages))
        raise self._error


class StaticState:
    """A state provider that always returns the same snapshot (or unknown)."""

    def __init__(self, state: RoundState | None = None, problem: str | None = None) -> None:
        self.reading = StateReading(state=state, problem=problem)

    def read(self, at: datetime) -> StateReading:
        """Return the fixed reading."""
        return self.reading


class RecordingChannel:
    """A channel that records what it was asked to send, and fails on request."""

    def __init__(self, name: str, *, connected: bool = True) -> None:
        self.name = name
        self._connected = connected
        self.sent: list[OutgoingMessage] = []
        self.attempts = 0
        self._failures: list[DeliveryError] = []

    @property
    def connected(self) -> bool:
        """Whether the gate may choose this channel."""
        return self._connected

    def disconnect(self) -> None:
        """From now on the channel is not connected."""
        self._connected = False

    def fail_next(self, count: int = 1, *, retryable: bool = True) -> None:
        """Make the next `count` sends fail."""
        self._failures.extend(
            DeliveryError(self.name, "scripted failure", retryable=retryable) for _ in range(count)
        )

    async def send(self, message: OutgoingMessage) -> None:
        """Record the message, or raise the next scripted failure."""
        self.attempts += 1
        if self._failures:
            raise self._failures.pop(0)
        self.sent.append(message)


async def no_sleep(seconds: float) -> None:
    """A sleep that returns at once, for retry loops under test."""


@dataclass
class Rig:
    """An app wired to in-memory fakes, with every part reachable for assertions."""

    thinker: Thinker
    messages: VolatileMessageStore
    rounds: VolatileRoundStore
    outbox: VolatileOutbox
    channels: dict[str, Channel]
    dispatcher: Dispatcher
    clock: FakeClock
    memories: MemoryStore
    stores: VolatileStores
    state: StaticState = field(default_factory=StaticState)

    @property
    def marks(self) -> VolatileMarks:
        """The marks of the rig's stores (pauses, cooldowns, refusals)."""
        return self.stores.marks


def make_rig(
    settings: Settings,
    *,
    model: ModelClient | None,
    channels: Sequence[Channel] | None = None,
    clock: FakeClock | None = None,
    state: StaticState | None = None,
    messages: VolatileMessageStore | None = None,
    prompts_dir: Path | None = None,
    persona_prompt: str = "",
    memories: VolatileMemoryStore | None = None,
    tools: Sequence[Tool] = (),
) -> Rig:
    """Build the app on in-memory stores; channels default to one connected sender `web`.

    `messages` is a session seeded beforehand, `memories` a memory store of
    the test's own (one that fails, or holds memories already).
    """
    clock = clock or FakeClock()
    state = state or StaticState()
    stores = VolatileStores.empty(messages)
    if memories is not None:
        stores = replace(stores, memories=memories)
    senders: dict[str, Channel] = {
        c.name: c for c in (channels if channels is not None else [RecordingChannel("web")])
    }
    app = build_app(
        settings,
        stores,
        AppOverrides(
            model=model,
            clock=clock,
            state=state,
            channels=senders,
            prompts_dir=prompts_dir,
            persona_prompt=persona_prompt,
            sleep=no_sleep,
            tools=tools,
        ),
    )
    return Rig(
        app.thinker,
        stores.messages,
        stores.rounds,
        stores.outbox,
        senders,
        app.dispatcher,
        clock,
        app.memories,
        stores,
        state,
    )


async def seed_history(
    store: MessageStore,
    items: Sequence[tuple[str, str, str | None]],
    *,
    start: datetime,
    step: timedelta = timedelta(minutes=1),
    owner_id: str = "o",
) -> None:
    """Store (role, text, speaker) messages of one owner, `step` apart from `start` on."""
    for i, (role, text, speaker) in enumerate(items):
        await store.add(
            Message(
                owner_id=owner_id,
                role=role,
                text=text,
                speaker=speaker,
                created_at=start + i * step,
            )
        )


async def proactive_messages(store: MessageStore, owner_id: str, limit: int) -> list[Message]:
    """The newest `limit` proactive (written-back) messages of the main session, newest first."""
    history = await store.recent(owner_id, PROACTIVE_SCAN)
    found = [m for m in reversed(history) if m.origin == "proactive"]
    return found[:limit]


def run_cli(
    config: Path,
    *args: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `backthink --config CONFIG ARGS` as a real process and capture its output.

    `stdin`, when given, is the command's standard input.

    Raises:
        AssertionError: `check` is set and the command exited non-zero; the
            message carries the command, its exit code and both streams.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "backthink", "--config", str(config), *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        input=stdin,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"backthink {' '.join(args)}: exit {proc.returncode}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc
