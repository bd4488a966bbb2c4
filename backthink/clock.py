"""Where "now" comes from: the system clock, and a manual clock that moves only when told.

Both satisfy `backthink.ports.Clock`. The manual clock serves whatever runs
rounds at instants of its own choosing: the evaluation's scenarios, the
tests and the benchmarks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """Return the current instant."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that stands at an instant and moves only by `advance` and `set`."""

    def __init__(self, start: datetime) -> None:
        """Stand at `start`, an aware instant.

        Raises:
            ValueError: `start` has no time zone.
        """
        if start.tzinfo is None:
            raise ValueError("a manual clock needs an aware datetime")
        self._now = start

    def now(self) -> datetime:
        """Return the instant the clock stands at."""
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by `delta` and return the new instant."""
        self._now += delta
        return self._now

    def set(self, at: datetime) -> None:
        """Jump to `at`."""
        self._now = at
