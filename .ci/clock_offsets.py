"""Print the clock offsets (seconds) at which CI runs the suite again, one per line.

Each line is `OFFSET LABEL`: the number of seconds to add to the real clock so
that the tests' owner (Asia/Shanghai) sees the labelled local time.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

OWNER_TZ = ZoneInfo("Asia/Shanghai")  # the time zone of the tests' owner


def next_local(now: datetime, at: time, *, first_of_month: bool = False) -> datetime:
    """The next moment after `now` when the owner's clock shows `at` (on a 1st, if asked)."""
    local = now.astimezone(OWNER_TZ)
    day = local.date()
    while True:
        candidate = datetime.combine(day, at, tzinfo=OWNER_TZ)
        if candidate > local and (not first_of_month or candidate.day == 1):
            return candidate
        day += timedelta(days=1)


def main() -> None:
    now = datetime.now(UTC)
    targets = [
        ("owner-03:00", next_local(now, time(3, 0))),
        ("owner-23:30", next_local(now, time(23, 30))),
        ("owner-00:05-first-of-month", next_local(now, time(0, 5), first_of_month=True)),
    ]
    for label, target in targets:
        offset = int((target - now).total_seconds())
        sys.stdout.write(f"{offset} {label}@{target.isoformat()}\n")


if __name__ == "__main__":
    main()
