"""One day of the owner's life on a line: where each round, quiet hour and owner message falls.

Pure: rounds and messages in, positions out. A day is the owner's local day
(`owner.timezone`, never the machine's zone), from one local midnight to the
next, so a day that changes to or from summer time is 23 or 25 hours long and
every position is a share of that real length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from backthink.config import QuietHours
from backthink.models import Message, Outcome
from backthink.records import RoundRecord

WIDTH = 1000.0  # units across the timeline's drawing


@dataclass(frozen=True)
class Span:
    """A band on the line, from `x0` to `x1` (in units of WIDTH)."""

    x0: float
    x1: float


@dataclass(frozen=True)
class Mark:
    """One round on the line."""

    x: float
    record: RoundRecord

    @property
    def outcome(self) -> Outcome:
        """How the round ended."""
        return self.record.outcome


@dataclass(frozen=True)
class DayLine:
    """Everything the timeline of one day shows."""

    day: date
    start: datetime
    end: datetime
    marks: list[Mark]
    quiet: list[Span]
    owner: list[Span]

    def x(self, at: datetime) -> float:
        """Where an instant of this day lies on the line."""
        share = (at - self.start) / (self.end - self.start)
        return round(min(max(share, 0.0), 1.0) * WIDTH, 2)


# The days a page may show: a day, its neighbours (the page links them) and their
# midnights in UTC must all be dates Python can hold, whatever the owner's zone.
FIRST_DAY = date.min + timedelta(days=2)
LAST_DAY = date.max - timedelta(days=2)


def in_range(day: date) -> bool:
    """Whether a page can show `day` (far from the first and last dates there are)."""
    return FIRST_DAY <= day <= LAST_DAY


def day_bounds(day: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The UTC instants of the local midnight that starts `day` and the one that ends it."""
    start = datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz).astimezone(UTC)
    return start, end


def local_day(at: datetime, tz: ZoneInfo) -> date:
    """The owner's calendar day at an instant."""
    return at.astimezone(tz).date()


def lay_out(
    day: date,
    tz: ZoneInfo,
    *,
    rounds: Sequence[RoundRecord],
    owner_messages: Sequence[Message],
    quiet: QuietHours | None,
    activity_window: timedelta,
) -> DayLine:
    """Place a day's rounds, its quiet hours and the owner's messages on the line.

    An owner message is a band as long as the gate's activity window after it
    (the time its rounds count the owner as busy chatting); overlapping bands merge.
    """
    start, end = day_bounds(day, tz)
    line = DayLine(day, start, end, [], [], [])
    line.marks.extend(Mark(line.x(r.started_at), r) for r in rounds)
    if quiet is not None:
        line.quiet.extend(_quiet_spans(line, day, tz, quiet))
    line.owner.extend(
        _merged(line, [(m.created_at, m.created_at + activity_window) for m in owner_messages])
    )
    return line


def _quiet_spans(line: DayLine, day: date, tz: ZoneInfo, quiet: QuietHours) -> list[Span]:
    def at(t: time) -> datetime:
        return datetime.combine(day, t, tzinfo=tz).astimezone(UTC)

    if quiet.start < quiet.end:
        return [Span(line.x(at(quiet.start)), line.x(at(quiet.end)))]
    # The range crosses midnight: the morning's end of last night, tonight's beginning.
    return [Span(0.0, line.x(at(quiet.end))), Span(line.x(at(quiet.start)), WIDTH)]


def _merged(line: DayLine, ranges: list[tuple[datetime, datetime]]) -> list[Span]:
    spans: list[Span] = []
    for a, b in sorted(ranges):
        x0, x1 = line.x(a), line.x(b)
        if spans and x0 <= spans[-1].x1:
            spans[-1] = Span(spans[-1].x0, max(spans[-1].x1, x1))
        else:
            spans.append(Span(x0, x1))
    return spans
