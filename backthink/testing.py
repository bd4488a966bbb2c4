"""Fakes for tests and benchmarks: a settable clock, a scripted model, static state.

They implement the same ports as the real adapters, so a round built from
them behaves exactly like a production round minus the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from backthink.errors import ModelError
from backthink.models import ModelMessage, ModelReply, RoundState, StateReading
from backthink.store.memory import MemoryMessageStore, MemoryRoundStore

__all__ = [
    "FakeClock",
    "MemoryMessageStore",
    "MemoryRoundStore",
    "ScriptedModel",
    "StaticState",
]


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")

    def now(self) -> datetime:
        """Return the current fake instant."""
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move time forward and return the new instant."""
        self._now += delta
        return self._now

    def set(self, at: datetime) -> None:
        """Jump to an instant."""
        self._now = at


class ScriptedModel:
    """A model that answers from a script and records every request.

    Each script entry is a reply text or an exception to raise. A call with
    nothing left in the script fails the test loudly instead of inventing a reply.
    """

    def __init__(self, *script: str | Exception, name: str = "scripted") -> None:
        self._script = list(script)
        self._name = name
        self.calls: list[list[ModelMessage]] = []

    @property
    def model_name(self) -> str:
        """The model name recorded with rounds."""
        return self._name

    def push(self, *entries: str | Exception) -> None:
        """Append replies to the script."""
        self._script.extend(entries)

    async def complete(self, messages: Sequence[ModelMessage]) -> ModelReply:
        """Return (or raise) the next scripted entry."""
        self.calls.append(list(messages))
        if not self._script:
            raise AssertionError(f"unexpected model call #{len(self.calls)}: the script is empty")
        entry = self._script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        prompt = sum(len(m.text) for m in messages) // 4
        return ModelReply(
            text=entry,
            model=self._name,
            prompt_tokens=prompt,
            completion_tokens=len(entry) // 4,
            latency_ms=0.0,
        )

    def assert_complete(self) -> None:
        """Fail when scripted replies were never asked for."""
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted replies were never used")


class FailingModel(ScriptedModel):
    """A model whose every call raises the given error."""

    def __init__(self, error: ModelError) -> None:
        super().__init__()
        self._error = error

    async def complete(self, messages: Sequence[ModelMessage]) -> ModelReply:
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
