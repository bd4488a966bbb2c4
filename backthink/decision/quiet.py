"""Quiet hours: the owner's nightly range, as pure functions of an instant and a time zone.

The push gate asks whether an instant is inside quiet hours; the schedule asks
when they end. Both compare on the owner's local wall clock.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from backthink.config import QuietHours


def in_quiet_hours(at: datetime, quiet: QuietHours | None, tz: ZoneInfo) -> bool:
    """Whether `at` falls inside the owner's daily quiet hours.

    The range is compared on the owner's local wall clock, so it keeps its
    meaning across DST changes: 23:00-07:00 is 23:00-07:00 local on the night
    the clocks move, even though that night is an hour longer or shorter.
    """
    if quiet is None:
        return False
    local = at.astimezone(tz).time().replace(tzinfo=None)
    return _within(local, quiet.start, quiet.end)


def _within(t: time, start: time, end: time) -> bool:
    if start < end:
        return start <= t < end
    return t >= start or t < end  # the range crosses midnight


def quiet_end_after(at: datetime, quiet: QuietHours, tz: ZoneInfo) -> datetime:
    """The next instant after `at` at which the local clock reads the quiet range's end."""
    local = at.astimezone(tz)
    for days in (0, 1):
        candidate = datetime.combine(local.date() + timedelta(days=days), quiet.end, tzinfo=tz)
        if candidate > local:
            return candidate
    raise AssertionError("unreachable: a wall-clock time recurs within two days")
