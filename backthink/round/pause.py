"""Pausing an owner's rounds: one per-owner mark in the database that every round reads first.

The pause is the owner's mark `paused_until` (see `Marks`): the instant the pause
ends. It lives in the database, so it survives restarts and a running daemon
sees a pause set by another process at its next round. A pause without an end
is stored as `FOREVER`, an instant no clock reaches; resuming sets the mark to
now. A pause whose end has passed is simply no pause, so nothing ever has to
clean one up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from backthink.config import parse_duration
from backthink.errors import InputError
from backthink.ports import Marks

PAUSE_MARK = "paused_until"
# Stands for "until resumed": far past any real pause, and still a valid timestamp
# in SQLite's text form and PostgreSQL's timestamptz.
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)
MAX_PAUSE = timedelta(days=365)  # longer than this is a pause without --for
DURATION_HINT = "a duration such as '30m', '2h' or '1d'"


@dataclass(frozen=True)
class PauseState:
    """Whether an owner's rounds are paused at some instant, and until when.

    Attributes:
        paused: rounds end skipped/disabled.
        until: when the pause ends by itself; None while paused means until resumed.
    """

    paused: bool
    until: datetime | None = None

    def describe(self, tz: ZoneInfo) -> str:
        """One line saying what holds: "not paused", "paused until resumed" or until when."""
        if not self.paused:
            return "not paused"
        if self.until is None:
            return "paused until resumed"
        return f"paused until {self.until.astimezone(tz).strftime('%Y-%m-%d %H:%M:%S %Z')}"


NOT_PAUSED = PauseState(paused=False)


def pause_state(marked: datetime | None, at: datetime) -> PauseState:
    """Read a stored `paused_until` mark as of `at`; an end at or before `at` is no pause."""
    if marked is None or marked <= at:
        return NOT_PAUSED
    return PauseState(paused=True, until=None if marked >= FOREVER else marked)


def parse_pause_duration(text: str) -> timedelta:
    """Parse the `--for` of `backthink pause`, the same syntax as durations in the config.

    Raises:
        InputError: not a duration, not positive, or longer than `MAX_PAUSE`.
    """
    try:
        duration = parse_duration(text)
    except (ValueError, OverflowError):
        raise InputError(f"pause --for: {text[:40]!r} is not {DURATION_HINT}") from None
    if duration <= timedelta(0):
        raise InputError(f"pause --for: {text[:40]!r} is not a positive duration")
    if duration > MAX_PAUSE:
        raise InputError(
            f"pause --for: at most {MAX_PAUSE.days} days; to pause until resumed, leave out --for"
        )
    return duration


class Pauses:
    """Pauses, resumes and reads owners' pauses in their marks."""

    def __init__(self, marks: Marks) -> None:
        """Keep pauses as owners' marks in `marks`."""
        self._marks = marks

    async def state(self, owner_id: str, at: datetime) -> PauseState:
        """Whether the owner is paused at `at`.

        Raises:
            StoreError: the mark cannot be read.
        """
        return pause_state(await self._marks.marked_at(owner_id, PAUSE_MARK), at)

    async def pause(self, owner_id: str, *, at: datetime, length: timedelta | None) -> PauseState:
        """Pause from `at` for `length`, or until resumed when None; replaces any pause.

        Raises:
            StoreError: the mark cannot be written.
        """
        until = FOREVER if length is None else at + length
        await self._marks.mark(owner_id, PAUSE_MARK, until)
        return pause_state(until, at)

    async def resume(self, owner_id: str, *, at: datetime) -> PauseState:
        """End any pause at `at`; return the pause that held until then (maybe none).

        Raises:
            StoreError: the mark cannot be read or written.
        """
        before = await self.state(owner_id, at)
        if before.paused:
            await self._marks.mark(owner_id, PAUSE_MARK, at)
        return before
