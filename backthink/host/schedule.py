"""Schedule math: when the next heartbeat falls, as pure functions of explicit times.

Inside quiet hours the heartbeat slows to `schedule.quiet_heartbeat`, and the
first heartbeat after quiet hours falls when they end rather than up to a
whole slow interval later. `HeartbeatTrigger` wraps this for APScheduler.
"""

from __future__ import annotations

import random
import zlib
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger

from backthink.config import QuietHours
from backthink.decision.quiet import in_quiet_hours, quiet_end_after


def next_heartbeat(
    previous: datetime,
    *,
    heartbeat: timedelta,
    quiet_heartbeat: timedelta,
    quiet: QuietHours | None,
    tz: ZoneInfo,
) -> datetime:
    """The heartbeat after `previous`, before jitter.

    Outside quiet hours: `previous + heartbeat`. Inside: `previous +
    quiet_heartbeat`, but never later than the end of the quiet hours.
    """
    if quiet is None or not in_quiet_hours(previous, quiet, tz):
        return previous + heartbeat
    return min(previous + quiet_heartbeat, quiet_end_after(previous, quiet, tz))


class HeartbeatTrigger(BaseTrigger):  # type: ignore[misc]  # APScheduler 3 ships no type hints
    """An APScheduler trigger firing on `next_heartbeat`, with up to `jitter` added."""

    __slots__ = ("heartbeat", "jitter", "quiet", "quiet_heartbeat", "rng", "tz")

    def __init__(
        self,
        *,
        heartbeat: timedelta,
        quiet_heartbeat: timedelta,
        quiet: QuietHours | None,
        tz: ZoneInfo,
        jitter: timedelta = timedelta(0),
        rng: random.Random | None = None,
    ) -> None:
        self.heartbeat = heartbeat
        self.quiet_heartbeat = quiet_heartbeat
        self.quiet = quiet
        self.tz = tz
        self.jitter = jitter
        self.rng = rng or random.Random()

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime:
        """The next fire time: one step after the previous fire time (or after now)."""
        base = previous_fire_time or now
        nxt = next_heartbeat(
            base,
            heartbeat=self.heartbeat,
            quiet_heartbeat=self.quiet_heartbeat,
            quiet=self.quiet,
            tz=self.tz,
        )
        if self.jitter > timedelta(0):
            nxt += timedelta(seconds=self.rng.uniform(0, self.jitter.total_seconds()))
        return nxt

    def __str__(self) -> str:
        return f"heartbeat[{self.heartbeat}, quiet {self.quiet_heartbeat}]"

    def __getstate__(self) -> dict[str, Any]:
        # Jobs live in memory only; a trigger is never pickled.
        raise TypeError("HeartbeatTrigger is not serializable")


def phase(owner_id: str) -> float:
    """Where in the heartbeat an owner's first round falls, in (0, 1], the same at every start.

    Owners' rounds spread over the interval instead of all falling at once.
    """
    return (zlib.crc32(owner_id.encode()) % 10_000 + 1) / 10_000
