"""Tests for the push gate: tables of explicit instants, DST nights and generated inputs."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backthink.config import GateSettings, QuietHours
from backthink.decision.gate import (
    GateHistory,
    Verdict,
    channel_candidates,
    choose_channel,
    disturbance,
    evaluate,
    normalize_body,
    owner_active,
    pre_gate,
)
from backthink.decision.quiet import in_quiet_hours
from backthink.models import Availability, Decision, Outcome, PastPush, RoundState, Urgency

SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")

R, W, C = Urgency.ROUTINE, Urgency.WARNING, Urgency.CRITICAL
AVAILABLE = RoundState(availability=Availability.AVAILABLE)
BUSY = RoundState(availability=Availability.BUSY)
DND = RoundState(availability=Availability.DND)
NO_AVAILABILITY = RoundState()  # a state file that says nothing about availability
UNKNOWN = None  # no fresh state at all

DEFAULTS = GateSettings()
BODY = "今天降温了，出门记得加件外套。"
SUPPRESSED, DELIVERED, SKIPPED = Outcome.SUPPRESSED, Outcome.DELIVERED, Outcome.SKIPPED


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """An explicit UTC instant."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def local(
    tz: ZoneInfo, year: int, month: int, day: int, hour: int = 0, minute: int = 0
) -> datetime:
    """An unambiguous local wall-clock time, handed to the gate as a UTC instant."""
    return datetime(year, month, day, hour, minute, tzinfo=tz).astimezone(UTC)


def sh(day: int, hour: int, minute: int = 0) -> datetime:
    """A May 2026 wall-clock time in Shanghai (no DST there), as a UTC instant."""
    return local(SHANGHAI, 2026, 5, day, hour, minute)


NOON = sh(4, 14)  # a Monday afternoon in Shanghai, far from the default quiet hours
NIGHT = sh(4, 23, 30)  # inside the default quiet hours 23:00-07:00


def quiet(text: str) -> QuietHours:
    """A quiet range parsed the way the config parses it."""
    parsed = QuietHours.parse(text)
    assert parsed is not None
    return parsed


def pushed(at: datetime, body: str = "早安！", channel: str | None = "web") -> PastPush:
    """A proactive message delivered at `at`."""
    return PastPush(at=at, body=body, channel=channel)


def run(
    *,
    urgency: Urgency = R,
    body: str = BODY,
    named: str | None = None,
    state: RoundState | None = AVAILABLE,
    last_owner: datetime | None = None,
    owner_channels: Sequence[str | None] = (None,),
    pushes: Sequence[PastPush] = (),
    connected: Sequence[str] = ("web",),
    cfg: GateSettings = DEFAULTS,
    tz: ZoneInfo = SHANGHAI,
    at: datetime = NOON,
    started_at: datetime | None = None,
) -> Verdict:
    """Evaluate one push decision; the round started two minutes before `at` unless told."""
    return evaluate(
        Decision(push=True, urgency=urgency, body=body, channel=named),
        state=state,
        history=GateHistory(
            last_owner_message_at=last_owner, owner_channels=owner_channels, pushes=pushes
        ),
        connected=connected,
        session_channel="web",
        settings=cfg,
        tz=tz,
        started_at=started_at if started_at is not None else at - timedelta(minutes=2),
        at=at,
    )


def minutes_inside(tz: ZoneInfo, quiet_range: str, start: datetime, end: datetime) -> int:
    """How many real minutes in [start, end) fall inside the quiet range."""
    q = quiet(quiet_range)
    count, at = 0, start
    while at < end:
        count += in_quiet_hours(at, q, tz)
        at += timedelta(minutes=1)
    return count


# --- Quiet-hours math --------------------------------------------------------------------------

QUIET_TABLE = [
    # A range that does not cross midnight: start inclusive, end exclusive.
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 4, 59, 59), False, id="day-before-start"),
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 5, 0), True, id="day-at-start"),
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 5, 30), True, id="day-middle"),
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 5, 59, 59), True, id="day-last-second"),
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 6, 0), False, id="day-at-end"),
    pytest.param("13:00-14:00", SHANGHAI, utc(2026, 5, 4, 15, 30), False, id="day-at-night"),
    # A range that crosses midnight.
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 14, 59, 59), False, id="night-before"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 15, 0), True, id="night-at-start"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 16, 0), True, id="night-midnight"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 19, 0), True, id="night-03h"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 22, 59, 59), True, id="night-last-s"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 4, 23, 0), False, id="night-at-end"),
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 5, 5, 4, 0), False, id="night-noon"),
    # One instant, three owners: 2026-01-15 15:30 UTC.
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 1, 15, 15, 30), True, id="sh-23:30"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 1, 15, 15, 30), False, id="ny-10:30"),
    pytest.param("23:00-07:00", BERLIN, utc(2026, 1, 15, 15, 30), False, id="berlin-16:30"),
    # Another instant: 2026-01-15 04:30 UTC.
    pytest.param("23:00-07:00", SHANGHAI, utc(2026, 1, 15, 4, 30), False, id="sh-12:30"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 1, 15, 4, 30), True, id="ny-23:30"),
    pytest.param("23:00-07:00", BERLIN, utc(2026, 1, 15, 4, 30), True, id="berlin-05:30"),
    # The same UTC time means different local times in summer and in winter.
    pytest.param("23:00-07:00", BERLIN, utc(2026, 7, 15, 21, 30), True, id="berlin-summer-23:30"),
    pytest.param("23:00-07:00", BERLIN, utc(2026, 1, 15, 21, 30), False, id="berlin-winter-22:30"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 7, 15, 3, 30), True, id="ny-summer-23:30"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 1, 15, 3, 30), False, id="ny-winter-22:30"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 7, 15, 11, 0), False, id="ny-summer-07:00"),
    pytest.param("23:00-07:00", NEW_YORK, utc(2026, 1, 15, 11, 0), True, id="ny-winter-06:00"),
]


@pytest.mark.parametrize(("quiet_range", "tz", "at", "expected"), QUIET_TABLE)
def test_quiet_hours_on_ordinary_days(
    quiet_range: str, tz: ZoneInfo, at: datetime, expected: bool
) -> None:
    """Quiet hours compare the owner's local wall clock: start inclusive, end exclusive."""
    assert in_quiet_hours(at, quiet(quiet_range), tz) is expected


DST_TABLE = [
    # New York, spring forward 2026-03-08: 02:00 EST jumps to 03:00 EDT at 07:00 UTC.
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 3, 59), False, id="ny-spring-22:59est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 4, 0), True, id="ny-spring-23:00est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 6, 0), True, id="ny-spring-01:00est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 6, 59, 59), True, id="ny-spring-01:59"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 7, 0), True, id="ny-spring-03:00edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 7, 30), True, id="ny-spring-03:30edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 10, 59), True, id="ny-spring-06:59edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 3, 8, 11, 0), False, id="ny-spring-07:00edt"),
    pytest.param(NEW_YORK, "01:00-03:00", utc(2026, 3, 8, 6, 59, 59), True, id="ny-spring-1-3-in"),
    pytest.param(NEW_YORK, "01:00-03:00", utc(2026, 3, 8, 7, 0), False, id="ny-spring-1-3-out"),
    # The local hour 02:00-03:00 does not exist that night: the range never applies.
    pytest.param(NEW_YORK, "02:00-03:00", utc(2026, 3, 8, 6, 59, 59), False, id="ny-gap-before"),
    pytest.param(NEW_YORK, "02:00-03:00", utc(2026, 3, 8, 7, 0), False, id="ny-gap-after"),
    # New York, fall back 2026-11-01: 02:00 EDT falls back to 01:00 EST at 06:00 UTC.
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 2, 59), False, id="ny-fall-22:59edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 3, 0), True, id="ny-fall-23:00edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 5, 0), True, id="ny-fall-01:00edt"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 6, 0), True, id="ny-fall-01:00est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 7, 0), True, id="ny-fall-02:00est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 8, 30), True, id="ny-fall-03:30est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 11, 0), True, id="ny-fall-06:00est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 11, 59), True, id="ny-fall-06:59est"),
    pytest.param(NEW_YORK, "23:00-07:00", utc(2026, 11, 1, 12, 0), False, id="ny-fall-07:00est"),
    pytest.param(NEW_YORK, "01:00-02:00", utc(2026, 11, 1, 5, 30), True, id="ny-fall-1-2-first"),
    pytest.param(NEW_YORK, "01:00-02:00", utc(2026, 11, 1, 6, 30), True, id="ny-fall-1-2-second"),
    pytest.param(NEW_YORK, "01:00-02:00", utc(2026, 11, 1, 7, 0), False, id="ny-fall-1-2-end"),
    # Berlin, spring forward 2026-03-29: 02:00 CET jumps to 03:00 CEST at 01:00 UTC.
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 28, 21, 59), False, id="be-spring-22:59"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 28, 22, 0), True, id="be-spring-23:00cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 0, 0), True, id="be-spring-01:00cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 0, 59), True, id="be-spring-01:59cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 1, 0), True, id="be-spring-03:00cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 1, 30), True, id="be-spring-03:30cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 4, 59), True, id="be-spring-06:59cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 3, 29, 5, 0), False, id="be-spring-07:00cest"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 3, 29, 0, 59, 59), False, id="be-gap-before"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 3, 29, 1, 0), False, id="be-gap-after"),
    pytest.param(BERLIN, "13:00-14:00", utc(2026, 3, 29, 11, 0), True, id="be-spring-13:00cest"),
    pytest.param(BERLIN, "13:00-14:00", utc(2026, 3, 29, 12, 0), False, id="be-spring-14:00cest"),
    # Berlin, fall back 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00 UTC.
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 24, 20, 59), False, id="be-fall-22:59"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 24, 21, 0), True, id="be-fall-23:00cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 24, 23, 0), True, id="be-fall-01:00cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 25, 0, 0), True, id="be-fall-02:00cest"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 25, 1, 0), True, id="be-fall-02:00cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 25, 2, 30), True, id="be-fall-03:30cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 25, 5, 59), True, id="be-fall-06:59cet"),
    pytest.param(BERLIN, "23:00-07:00", utc(2026, 10, 25, 6, 0), False, id="be-fall-07:00cet"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 10, 25, 0, 30), True, id="be-fall-2-3-first"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 10, 25, 1, 30), True, id="be-fall-2-3-second"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 10, 25, 2, 0), False, id="be-fall-2-3-end"),
]


@pytest.mark.parametrize(("tz", "quiet_range", "at", "expected"), DST_TABLE)
def test_quiet_hours_on_dst_nights(
    tz: ZoneInfo, quiet_range: str, at: datetime, expected: bool
) -> None:
    """On the nights the clocks move, quiet hours still follow the local wall clock."""
    assert in_quiet_hours(at, quiet(quiet_range), tz) is expected


DST_NIGHT_LENGTHS = [
    # Scans run from local noon to the next local noon.
    pytest.param(SHANGHAI, "23:00-07:00", utc(2026, 5, 4, 4), utc(2026, 5, 5, 4), 480, id="sh"),
    pytest.param(
        NEW_YORK, "23:00-07:00", utc(2026, 3, 7, 17), utc(2026, 3, 8, 16), 420, id="ny-spring"
    ),
    pytest.param(
        NEW_YORK, "23:00-07:00", utc(2026, 10, 31, 16), utc(2026, 11, 1, 17), 540, id="ny-fall"
    ),
    pytest.param(
        BERLIN, "23:00-07:00", utc(2026, 3, 28, 11), utc(2026, 3, 29, 10), 420, id="be-spring"
    ),
    pytest.param(
        BERLIN, "23:00-07:00", utc(2026, 10, 24, 10), utc(2026, 10, 25, 11), 540, id="be-fall"
    ),
    # A range made only of nonexistent local times is empty that night, without error.
    pytest.param(NEW_YORK, "02:00-03:00", utc(2026, 3, 7, 17), utc(2026, 3, 8, 16), 0, id="ny-gap"),
    pytest.param(BERLIN, "02:00-03:00", utc(2026, 3, 28, 11), utc(2026, 3, 29, 10), 0, id="be-gap"),
    # A range starting inside the gap begins when the clocks land after it (03:00 EDT).
    pytest.param(
        NEW_YORK, "02:30-06:00", utc(2026, 3, 7, 17), utc(2026, 3, 8, 16), 180, id="ny-start-in-gap"
    ),
    # A range ending inside the gap ends when the clocks jump past it (02:00 EST).
    pytest.param(
        NEW_YORK, "23:00-02:30", utc(2026, 3, 7, 17), utc(2026, 3, 8, 16), 180, id="ny-end-in-gap"
    ),
    pytest.param(
        BERLIN, "01:00-03:00", utc(2026, 3, 28, 11), utc(2026, 3, 29, 10), 60, id="be-around-gap"
    ),
    # A repeated local hour is quiet both times it happens.
    pytest.param(
        NEW_YORK, "01:00-02:00", utc(2026, 10, 31, 16), utc(2026, 11, 1, 17), 120, id="ny-repeat"
    ),
    pytest.param(
        NEW_YORK, "02:00-03:00", utc(2026, 10, 31, 16), utc(2026, 11, 1, 17), 60, id="ny-after-fold"
    ),
    pytest.param(
        BERLIN, "02:00-03:00", utc(2026, 10, 24, 10), utc(2026, 10, 25, 11), 120, id="be-repeat"
    ),
]


@pytest.mark.parametrize(("tz", "quiet_range", "start", "end", "minutes"), DST_NIGHT_LENGTHS)
def test_quiet_night_lasts_the_local_wall_clock_span(
    tz: ZoneInfo, quiet_range: str, start: datetime, end: datetime, minutes: int
) -> None:
    """23:00-07:00 lasts 7 real hours on a spring-forward night and 9 on a fall-back night."""
    assert minutes_inside(tz, quiet_range, start, end) == minutes


def test_no_quiet_hours_means_never_quiet() -> None:
    """With quiet hours switched off, no instant is quiet."""
    assert GateSettings(quiet_hours="off").quiet_hours is None
    assert in_quiet_hours(NIGHT, None, SHANGHAI) is False


# --- Pre-gate ----------------------------------------------------------------------------------

PRE_GATE_TABLE = [
    pytest.param((), None, "critical_only", NOON, "no_route", id="nothing-connected"),
    pytest.param(("web",), NOON - timedelta(minutes=3), "critical_only", NOON, "owner_active",
                 id="owner-wrote-3m-ago"),
    pytest.param(("web",), NOON - timedelta(minutes=9, seconds=59), "critical_only", NOON,
                 "owner_active", id="owner-wrote-just-inside-window"),
    pytest.param(("web",), NOON - timedelta(minutes=10), "critical_only", NOON, None,
                 id="owner-wrote-exactly-window-ago"),
    pytest.param(("web",), None, "critical_only", NOON, None, id="owner-never-wrote"),
    pytest.param(("web",), None, "skip", NIGHT, "quiet_hours", id="skip-mode-in-quiet-hours"),
    pytest.param(("web",), None, "skip", sh(5, 6, 59), "quiet_hours", id="skip-mode-06:59"),
    pytest.param(("web",), None, "skip", sh(5, 7, 0), None, id="skip-mode-07:00"),
    pytest.param(("web",), None, "skip", NOON, None, id="skip-mode-outside-quiet-hours"),
    pytest.param(("web",), None, "critical_only", NIGHT, None, id="critical-only-never-skips"),
    # Several reasons at once: no route, then owner active, then quiet hours.
    pytest.param((), NIGHT - timedelta(minutes=1), "skip", NIGHT, "no_route",
                 id="order-no-route-first"),
    pytest.param(("web",), NIGHT - timedelta(minutes=1), "skip", NIGHT, "owner_active",
                 id="order-owner-active-before-quiet"),
]  # fmt: skip


@pytest.mark.parametrize(("connected", "last_owner", "mode", "at", "reason"), PRE_GATE_TABLE)
def test_pre_gate(
    connected: tuple[str, ...],
    last_owner: datetime | None,
    mode: str,
    at: datetime,
    reason: str | None,
) -> None:
    """The pre-gate skips a round for no route, an active owner or skip-mode quiet hours."""
    verdict = pre_gate(
        settings=GateSettings(quiet_mode=mode),
        tz=SHANGHAI,
        connected=connected,
        last_owner_message_at=last_owner,
        at=at,
        session_channel="web",
    )
    if reason is None:
        assert verdict is None
    else:
        assert verdict == Verdict(SKIPPED, reason)


def test_pre_gate_skip_mode_without_quiet_hours_never_skips() -> None:
    """quiet_mode "skip" does nothing when quiet hours are switched off."""
    cfg = GateSettings(quiet_mode="skip", quiet_hours="off")
    verdict = pre_gate(
        settings=cfg,
        tz=SHANGHAI,
        connected=("web",),
        last_owner_message_at=None,
        at=NIGHT,
        session_channel="web",
    )
    assert verdict is None


# --- Disturbance cascade -----------------------------------------------------------------------

DISTURBANCE_TABLE = [
    # Outside quiet hours.
    pytest.param(R, AVAILABLE, NOON, DELIVERED, "web", id="routine-available-day"),
    pytest.param(R, BUSY, NOON, SUPPRESSED, "unavailable", id="routine-busy-day"),
    pytest.param(R, DND, NOON, SUPPRESSED, "unavailable", id="routine-dnd-day"),
    pytest.param(R, UNKNOWN, NOON, DELIVERED, "web", id="routine-unknown-state-day"),
    pytest.param(R, NO_AVAILABILITY, NOON, DELIVERED, "web", id="routine-no-availability-day"),
    pytest.param(W, AVAILABLE, NOON, DELIVERED, "web", id="warning-available-day"),
    pytest.param(W, BUSY, NOON, DELIVERED, "web", id="warning-busy-day"),
    pytest.param(W, DND, NOON, SUPPRESSED, "unavailable", id="warning-dnd-day"),
    pytest.param(W, UNKNOWN, NOON, DELIVERED, "web", id="warning-unknown-state-day"),
    pytest.param(W, NO_AVAILABILITY, NOON, DELIVERED, "web", id="warning-no-availability-day"),
    pytest.param(C, AVAILABLE, NOON, DELIVERED, "web", id="critical-available-day"),
    pytest.param(C, BUSY, NOON, DELIVERED, "web", id="critical-busy-day"),
    pytest.param(C, DND, NOON, DELIVERED, "web", id="critical-dnd-day"),
    pytest.param(C, UNKNOWN, NOON, DELIVERED, "web", id="critical-unknown-state-day"),
    pytest.param(C, NO_AVAILABILITY, NOON, DELIVERED, "web", id="critical-no-availability-day"),
    # Inside quiet hours.
    pytest.param(R, AVAILABLE, NIGHT, SUPPRESSED, "quiet_hours", id="routine-available-night"),
    pytest.param(R, BUSY, NIGHT, SUPPRESSED, "quiet_hours", id="routine-busy-night"),
    pytest.param(R, DND, NIGHT, SUPPRESSED, "quiet_hours", id="routine-dnd-night"),
    pytest.param(R, UNKNOWN, NIGHT, SUPPRESSED, "quiet_hours", id="routine-unknown-night"),
    pytest.param(R, NO_AVAILABILITY, NIGHT, SUPPRESSED, "quiet_hours", id="routine-no-avail-night"),
    pytest.param(W, AVAILABLE, NIGHT, SUPPRESSED, "quiet_hours", id="warning-available-night"),
    pytest.param(W, BUSY, NIGHT, SUPPRESSED, "quiet_hours", id="warning-busy-night"),
    pytest.param(W, DND, NIGHT, SUPPRESSED, "quiet_hours", id="warning-dnd-night"),
    pytest.param(W, UNKNOWN, NIGHT, SUPPRESSED, "quiet_hours", id="warning-unknown-night"),
    pytest.param(W, NO_AVAILABILITY, NIGHT, SUPPRESSED, "quiet_hours", id="warning-no-avail-night"),
    pytest.param(C, AVAILABLE, NIGHT, DELIVERED, "web", id="critical-available-night"),
    pytest.param(C, BUSY, NIGHT, DELIVERED, "web", id="critical-busy-night"),
    pytest.param(C, DND, NIGHT, DELIVERED, "web", id="critical-dnd-night"),
    pytest.param(C, UNKNOWN, NIGHT, DELIVERED, "web", id="critical-unknown-night"),
    pytest.param(C, NO_AVAILABILITY, NIGHT, DELIVERED, "web", id="critical-no-avail-night"),
    # Quiet-hour edges, through evaluate.
    pytest.param(R, AVAILABLE, sh(4, 22, 59), DELIVERED, "web", id="routine-22:59"),
    pytest.param(R, AVAILABLE, sh(4, 23, 0), SUPPRESSED, "quiet_hours", id="routine-23:00"),
    pytest.param(W, BUSY, sh(5, 3, 0), SUPPRESSED, "quiet_hours", id="warning-busy-03:00"),
    pytest.param(R, AVAILABLE, sh(5, 6, 59), SUPPRESSED, "quiet_hours", id="routine-06:59"),
    pytest.param(R, AVAILABLE, sh(5, 7, 0), DELIVERED, "web", id="routine-07:00"),
]


@pytest.mark.parametrize(("urgency", "state", "at", "outcome", "reason"), DISTURBANCE_TABLE)
def test_disturbance_cascade(
    urgency: Urgency, state: RoundState | None, at: datetime, outcome: Outcome, reason: str
) -> None:
    """Routine needs the owner available, warning tolerates busy, only critical breaks the rest."""
    verdict = run(urgency=urgency, state=state, at=at)
    assert (verdict.outcome, verdict.reason) == (outcome, reason)


@pytest.mark.parametrize(
    ("urgency", "state", "is_quiet", "reason"),
    [
        pytest.param(R, DND, True, "quiet_hours", id="quiet-hours-before-dnd"),
        pytest.param(W, BUSY, True, "quiet_hours", id="quiet-hours-before-busy"),
        pytest.param(R, BUSY, False, "unavailable", id="routine-busy"),
        pytest.param(W, BUSY, False, None, id="warning-busy"),
        pytest.param(W, None, False, None, id="warning-unknown"),
        pytest.param(C, DND, True, None, id="critical-everything"),
    ],
)
def test_disturbance_function(
    urgency: Urgency, state: RoundState | None, is_quiet: bool, reason: str | None
) -> None:
    """disturbance() names quiet hours first, then unavailability, or nothing when allowed."""
    assert disturbance(urgency, state, quiet=is_quiet) == reason


# --- Activity gate -----------------------------------------------------------------------------

ACTIVITY_TABLE = [
    pytest.param(R, NOON - timedelta(minutes=5), None, "owner_active", id="wrote-5m-ago"),
    pytest.param(R, NOON - timedelta(minutes=9, seconds=59), None, "owner_active",
                 id="wrote-just-inside-window"),
    pytest.param(R, NOON - timedelta(minutes=10), None, "web", id="wrote-exactly-window-ago"),
    pytest.param(R, NOON - timedelta(minutes=11), None, "web", id="wrote-11m-ago"),
    # The round started 40 minutes ago; the owner wrote while the model was thinking.
    pytest.param(R, NOON - timedelta(minutes=30), NOON - timedelta(minutes=40), "owner_active",
                 id="wrote-while-thinking-outside-window"),
    pytest.param(R, NOON - timedelta(minutes=50), NOON - timedelta(minutes=40), "web",
                 id="wrote-before-round-outside-window"),
    pytest.param(C, NOON - timedelta(minutes=5), None, "owner_active", id="critical-also-waits"),
    pytest.param(C, NOON - timedelta(minutes=30), NOON - timedelta(minutes=40), "owner_active",
                 id="critical-owner-came-back"),
    pytest.param(R, None, None, "web", id="owner-never-wrote"),
    # A message dated past the clock skew was mis-dated; it says nothing about now.
    pytest.param(R, NOON + timedelta(hours=5), None, "web", id="future-message-is-no-activity"),
    pytest.param(C, NOON + timedelta(days=30), None, "web", id="far-future-message"),
    pytest.param(R, NOON + timedelta(minutes=3), None, "owner_active",
                 id="message-within-clock-skew-counts"),
]  # fmt: skip


@pytest.mark.parametrize(("urgency", "last_owner", "started_at", "reason"), ACTIVITY_TABLE)
def test_activity_gate(
    urgency: Urgency, last_owner: datetime | None, started_at: datetime | None, reason: str
) -> None:
    """A push waits while the owner is chatting or came back during the round."""
    verdict = run(urgency=urgency, last_owner=last_owner, started_at=started_at)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


def test_future_owner_message_is_no_activity_anywhere() -> None:
    """A future-dated owner message neither skips the round nor holds the push, with a note."""
    future = NOON + timedelta(hours=5)
    assert not owner_active(future, timedelta(minutes=10), NOON)
    assert owner_active(NOON + timedelta(minutes=4), timedelta(minutes=10), NOON)
    skip = pre_gate(
        settings=DEFAULTS,
        tz=SHANGHAI,
        connected=("web",),
        last_owner_message_at=future,
        at=NOON,
        session_channel="web",
    )
    assert skip is None
    verdict = run(last_owner=future)
    assert (verdict.outcome, verdict.reason) == (DELIVERED, "web")
    assert any("future" in note for note in verdict.notes)
    assert not any("future" in note for note in run(last_owner=NOON - timedelta(hours=1)).notes)


def test_future_owner_message_is_no_answer() -> None:
    """A future-dated owner message does not count as a reply to earlier pushes."""
    pushes = [PastPush(at=NOON - timedelta(hours=h), body=f"b{h}") for h in (3, 6)]
    cfg = GateSettings(max_unanswered=2, min_interval=timedelta(minutes=1))
    verdict = run(last_owner=NOON + timedelta(days=1), pushes=pushes, cfg=cfg)
    assert (verdict.outcome, verdict.reason) == (SUPPRESSED, "unanswered")
    assert any("future" in note for note in verdict.notes)


def test_owner_active_window_is_exclusive() -> None:
    """owner_active() is true strictly within the window and false without any message."""
    window = timedelta(minutes=10)
    assert owner_active(NOON - timedelta(minutes=1), window, NOON)
    assert not owner_active(NOON - window, window, NOON)
    assert not owner_active(None, window, NOON)


# --- Rate limits -------------------------------------------------------------------------------

# The owner answered every earlier push, so only the rate limits speak.
ANSWERED = NOON - timedelta(minutes=20)

MIN_INTERVAL_TABLE = [
    pytest.param(R, [pushed(NOON - timedelta(minutes=30))], "min_interval", id="routine-30m"),
    pytest.param(W, [pushed(NOON - timedelta(hours=1, minutes=59))], "min_interval",
                 id="warning-1h59m"),
    pytest.param(R, [pushed(NOON - timedelta(hours=2))], "web", id="routine-exactly-2h"),
    pytest.param(R, [pushed(NOON - timedelta(hours=3))], "web", id="routine-3h"),
    pytest.param(C, [pushed(NOON - timedelta(minutes=30))], "web", id="critical-bypasses"),
    # The history arrives oldest first: the newest push still decides.
    pytest.param(R, [pushed(NOON - timedelta(hours=5)), pushed(NOON - timedelta(minutes=30))],
                 "min_interval", id="unsorted-history"),
]  # fmt: skip


@pytest.mark.parametrize(("urgency", "pushes", "reason"), MIN_INTERVAL_TABLE)
def test_min_interval(urgency: Urgency, pushes: list[PastPush], reason: str) -> None:
    """Pushes keep min_interval apart; critical bypasses the interval."""
    verdict = run(urgency=urgency, pushes=pushes, last_owner=ANSWERED)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


CAP = GateSettings(min_interval="10m", max_unanswered=10)


def _bodies(*instants: datetime) -> list[PastPush]:
    return [pushed(at, body=f"之前的第{i}条消息") for i, at in enumerate(instants)]


DAILY_CAP_TABLE = [
    pytest.param(R, SHANGHAI, sh(4, 20), _bodies(sh(4, 8), sh(4, 10), sh(4, 12), sh(4, 14)),
                 "daily_cap", id="four-today"),
    pytest.param(C, SHANGHAI, sh(4, 20), _bodies(sh(4, 8), sh(4, 10), sh(4, 12), sh(4, 14)),
                 "daily_cap", id="critical-does-not-bypass"),
    pytest.param(R, SHANGHAI, sh(4, 20), _bodies(sh(3, 23, 30), sh(4, 10), sh(4, 12), sh(4, 14)),
                 "web", id="yesterday-23:30-does-not-count"),
    # 07:30 in Shanghai is 23:30 UTC of the day before: the owner's day decides.
    pytest.param(R, SHANGHAI, sh(4, 20), _bodies(sh(4, 7, 30), sh(4, 10), sh(4, 12), sh(4, 14)),
                 "daily_cap", id="local-morning-is-utc-yesterday"),
    pytest.param(R, SHANGHAI, sh(4, 20), _bodies(sh(4, 10), sh(4, 12), sh(4, 14)), "web",
                 id="three-today"),
    # 23:30 EDT on May 3 is 03:30 UTC on May 4, the same UTC day as the decision.
    pytest.param(R, NEW_YORK, local(NEW_YORK, 2026, 5, 4, 10),
                 _bodies(local(NEW_YORK, 2026, 5, 3, 23, 30), local(NEW_YORK, 2026, 5, 4, 7),
                         local(NEW_YORK, 2026, 5, 4, 8), local(NEW_YORK, 2026, 5, 4, 9)),
                 "web", id="ny-yesterday-is-utc-today"),
    # Spring-forward day in New York: local midnight of March 8 is 05:00 UTC.
    pytest.param(R, NEW_YORK, utc(2026, 3, 8, 16),
                 _bodies(utc(2026, 3, 8, 4, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 8, 12),
                         utc(2026, 3, 8, 14)),
                 "web", id="ny-spring-day-23:30est-yesterday"),
    pytest.param(R, NEW_YORK, utc(2026, 3, 8, 16),
                 _bodies(utc(2026, 3, 8, 5, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 8, 12),
                         utc(2026, 3, 8, 14)),
                 "daily_cap", id="ny-spring-day-00:30est-today"),
    # Fall-back day in New York: local midnight of November 1 is 04:00 UTC (still EDT).
    pytest.param(R, NEW_YORK, utc(2026, 11, 1, 20),
                 _bodies(utc(2026, 11, 1, 3, 59), utc(2026, 11, 1, 13), utc(2026, 11, 1, 15),
                         utc(2026, 11, 1, 17)),
                 "web", id="ny-fall-day-23:59edt-yesterday"),
    pytest.param(R, NEW_YORK, utc(2026, 11, 1, 20),
                 _bodies(utc(2026, 11, 1, 4, 0), utc(2026, 11, 1, 13), utc(2026, 11, 1, 15),
                         utc(2026, 11, 1, 17)),
                 "daily_cap", id="ny-fall-day-00:00edt-today"),
    # Berlin spring-forward day: local midnight of March 29 is 23:00 UTC on March 28.
    pytest.param(R, BERLIN, utc(2026, 3, 29, 16),
                 _bodies(utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 8), utc(2026, 3, 29, 10),
                         utc(2026, 3, 29, 12)),
                 "daily_cap", id="berlin-spring-day-midnight-counts"),
]  # fmt: skip


@pytest.mark.parametrize(("urgency", "tz", "at", "pushes", "reason"), DAILY_CAP_TABLE)
def test_daily_cap(
    urgency: Urgency, tz: ZoneInfo, at: datetime, pushes: list[PastPush], reason: str
) -> None:
    """At most daily_cap pushes per owner-local day, critical ones included."""
    verdict = run(urgency=urgency, tz=tz, at=at, pushes=pushes, cfg=CAP)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


# --- Unanswered backoff ------------------------------------------------------------------------

UNANSWERED_CFG = GateSettings(min_interval="10m", daily_cap=10, max_unanswered=2)

UNANSWERED_TABLE = [
    pytest.param(R, sh(4, 10), _bodies(sh(4, 11), sh(4, 12)), "unanswered",
                 id="two-after-last-reply"),
    pytest.param(W, sh(4, 10), _bodies(sh(4, 11), sh(4, 12)), "unanswered",
                 id="warning-two-after-last-reply"),
    pytest.param(R, sh(4, 11, 30), _bodies(sh(4, 11), sh(4, 12)), "web",
                 id="one-after-last-reply"),
    pytest.param(R, None, _bodies(sh(4, 11), sh(4, 12)), "unanswered", id="owner-never-wrote"),
    pytest.param(R, None, _bodies(sh(4, 12)), "web", id="owner-never-wrote-one-push"),
    pytest.param(C, sh(4, 10), _bodies(sh(4, 11), sh(4, 12)), "web", id="critical-passes"),
    pytest.param(C, None, _bodies(sh(4, 9), sh(4, 11), sh(4, 12)), "web",
                 id="critical-passes-owner-never-wrote"),
]  # fmt: skip


@pytest.mark.parametrize(("urgency", "last_owner", "pushes", "reason"), UNANSWERED_TABLE)
def test_unanswered_backoff(
    urgency: Urgency, last_owner: datetime | None, pushes: list[PastPush], reason: str
) -> None:
    """After max_unanswered pushes without an owner reply, only critical passes."""
    verdict = run(urgency=urgency, last_owner=last_owner, pushes=pushes, cfg=UNANSWERED_CFG)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


# --- Duplicate suppression ---------------------------------------------------------------------

SENT = "Good morning! 记得吃早饭。"

DUPLICATE_TABLE = [
    pytest.param(R, SENT, 3, DEFAULTS, "duplicate", id="identical"),
    pytest.param(R, "good MORNING 记得吃早饭", 3, DEFAULTS, "duplicate", id="case-and-punctuation"),
    pytest.param(R, "Ｇｏｏｄ　ｍｏｒｎｉｎｇ！记得吃早饭。", 3, DEFAULTS, "duplicate",
                 id="full-width"),
    pytest.param(R, "Good  morning,\n记得 吃 早饭……", 3, DEFAULTS, "duplicate", id="spaces"),
    pytest.param(R, "Good morning! 记得吃午饭。", 3, DEFAULTS, "web", id="different-words"),
    pytest.param(R, SENT, 25, DEFAULTS, "web", id="outside-window"),
    pytest.param(R, SENT, 24, DEFAULTS, "duplicate", id="exactly-window-ago"),
    pytest.param(C, SENT, 3, DEFAULTS, "duplicate", id="critical-also-deduplicated"),
    pytest.param(R, SENT, 30, GateSettings(duplicate_window="48h"), "duplicate",
                 id="longer-window"),
]  # fmt: skip


@pytest.mark.parametrize(("urgency", "body", "hours_ago", "cfg", "reason"), DUPLICATE_TABLE)
def test_duplicate_suppression(
    urgency: Urgency, body: str, hours_ago: int, cfg: GateSettings, reason: str
) -> None:
    """The same normalized body is not delivered twice within duplicate_window."""
    past = pushed(NOON - timedelta(hours=hours_ago), body=SENT)
    verdict = run(urgency=urgency, body=body, pushes=[past], last_owner=ANSWERED, cfg=cfg)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param("Hello", "hELLO", True, id="case"),
        pytest.param("ＡＢＣ１２３", "abc123", True, id="full-width-letters-digits"),
        pytest.param("早上好，世界！", "早上好,世界!", True, id="full-width-punctuation"),
        pytest.param("早上好\u3000世界", "早上好世界", True, id="ideographic-space"),
        pytest.param(" a\tb\nc ", "abc", True, id="whitespace"),
        pytest.param("a_b-c.d", "abcd", True, id="underscore-and-punctuation"),
        pytest.param("STRASSE", "straße", True, id="casefold"),
        pytest.param("早上好", "晚上好", False, id="different-han"),
        pytest.param("ok", "okay", False, id="different-latin"),
        pytest.param("1", "2", False, id="different-digits"),
    ],
)
def test_normalize_body(a: str, b: str, same: bool) -> None:
    """Duplicate identity ignores case, width, spaces and punctuation, never the words."""
    assert (normalize_body(a) == normalize_body(b)) is same


# --- Channel choice ----------------------------------------------------------------------------

CHANNEL_TABLE = [
    pytest.param("phone", ("web",), ("web", "phone"), None, "phone", False,
                 id="named-and-connected-wins"),
    pytest.param("phone", ("web",), ("web",), None, "web", True,
                 id="named-not-connected-falls-back-with-note"),
    pytest.param(None, ("tg", "phone", None), ("web", "phone"), None, "phone", False,
                 id="most-recent-connected-owner-channel"),
    pytest.param(None, (None, "phone"), ("web", "phone"), None, "web", False,
                 id="none-channel-counts-as-web"),
    pytest.param(None, (None,), ("phone",), None, "phone", False,
                 id="web-not-connected-the-next-connected-one"),
    pytest.param(None, (None,), ("phone",), "web", None, False,
                 id="web-not-connected-and-named-default"),
    pytest.param(None, (), ("web", "phone"), "phone", "phone", False, id="default-when-nothing"),
    pytest.param(None, ("phone",), ("web", "phone"), "web", "phone", False,
                 id="owner-channel-before-default"),
    pytest.param(None, (), ("phone",), "web", None, False, id="default-not-connected"),
    pytest.param(None, (), ("web",), None, "web", False, id="nothing-known-goes-to-the-session"),
    pytest.param("email", (), ("web",), None, "web", True,
                 id="named-not-connected-falls-back-to-the-session"),
    pytest.param(None, (), (), "web", None, False, id="nothing-connected"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("named", "owner_channels", "connected", "default", "channel", "noted"), CHANNEL_TABLE
)
def test_choose_channel(
    named: str | None,
    owner_channels: tuple[str | None, ...],
    connected: tuple[str, ...],
    default: str | None,
    channel: str | None,
    noted: bool,
) -> None:
    """Named if connected, else the owner's latest connected channel, else the default."""
    chosen, notes = choose_channel(
        named,
        owner_channels=owner_channels,
        connected=connected,
        default_channel=default,
        session_channel="web",
    )
    assert chosen == channel
    assert bool(notes) is noted
    if noted:
        assert any(repr(named) in note for note in notes)


@pytest.mark.parametrize(
    ("session", "chosen"),
    [
        pytest.param("chat", "chat", id="the-web-type-channel-by-its-own-name"),
        pytest.param(None, "phone", id="no-session-channel-falls-through"),
    ],
)
def test_a_message_without_channel_counts_as_the_session_channel(
    session: str | None, chosen: str
) -> None:
    """The owner's channel-less message names the web-type channel, whatever it is called."""
    got, _ = choose_channel(
        None,
        owner_channels=(None, "phone"),
        connected=("phone", "chat"),
        default_channel=None,
        session_channel=session,
    )
    assert got == chosen


@pytest.mark.parametrize(
    ("named", "owner_channels", "connected", "default", "channel", "noted"), CHANNEL_TABLE
)
def test_evaluate_delivers_to_exactly_one_channel(
    named: str | None,
    owner_channels: tuple[str | None, ...],
    connected: tuple[str, ...],
    default: str | None,
    channel: str | None,
    noted: bool,
) -> None:
    """A delivered verdict names one connected channel; with none it is suppressed as no_route."""
    verdict = run(
        named=named,
        owner_channels=owner_channels,
        connected=connected,
        cfg=GateSettings(default_channel=default),
    )
    if channel is None:
        assert (verdict.outcome, verdict.reason, verdict.channel) == (SUPPRESSED, "no_route", None)
    else:
        assert (verdict.outcome, verdict.reason, verdict.channel) == (DELIVERED, channel, channel)
        assert verdict.deliver
    assert bool(verdict.notes) is noted


# --- Cascade order -----------------------------------------------------------------------------

RULES = (
    "quiet_hours",
    "unavailable",
    "owner_active",
    "min_interval",
    "daily_cap",
    "unanswered",
    "duplicate",
    "no_route",
)


def scenario(applies: frozenset[str]) -> Verdict:
    """A routine push at 14:00 Shanghai where exactly the rules in `applies` would object."""
    cfg = GateSettings(
        quiet_hours="13:00-15:00" if "quiet_hours" in applies else "off",
        min_interval="2h" if "min_interval" in applies else "10m",
        daily_cap=0 if "daily_cap" in applies else 10,
        max_unanswered=0 if "unanswered" in applies else 10,
        # A default that is not connected leaves nowhere else to go.
        default_channel="web" if "no_route" in applies else None,
    )
    earlier = pushed(NOON - timedelta(minutes=30), body="午饭吃了吗？")
    owner_wrote = timedelta(minutes=5) if "owner_active" in applies else timedelta(hours=20)
    return run(
        state=DND if "unavailable" in applies else AVAILABLE,
        last_owner=NOON - owner_wrote,
        pushes=[earlier],
        body="午饭吃了吗" if "duplicate" in applies else "下午记得喝水。",
        connected=("phone",) if "no_route" in applies else ("web",),
        owner_channels=(None,),
        cfg=cfg,
    )


@pytest.mark.parametrize(
    ("applies", "reason"),
    [pytest.param(frozenset(RULES[i:]), RULES[i], id=f"from-{RULES[i]}") for i in range(len(RULES))]
    + [pytest.param(frozenset(), "web", id="none-applies")],
)
def test_cascade_order(applies: frozenset[str], reason: str) -> None:
    """When several rules object, the earliest in the cascade is the reason."""
    verdict = scenario(applies)
    assert verdict.reason == reason
    assert verdict.outcome is (DELIVERED if reason == "web" else SUPPRESSED)


def test_cascade_order_for_every_combination() -> None:
    """Every one of the 256 combinations of objecting rules yields the earliest one."""
    wrong = []
    for flags in itertools.product((False, True), repeat=len(RULES)):
        applies = frozenset(rule for rule, on in zip(RULES, flags, strict=True) if on)
        expected = next((rule for rule in RULES if rule in applies), "web")
        got = scenario(applies).reason
        if got != expected:
            wrong.append((sorted(applies), expected, got))
    assert wrong == []


# --- Odds and ends -----------------------------------------------------------------------------


def test_evaluate_rejects_a_no_push_decision() -> None:
    """evaluate() is only for push decisions; "no push" ends the round before the gate."""
    with pytest.raises(ValueError, match="push decisions only"):
        evaluate(
            Decision(push=False),
            state=AVAILABLE,
            history=GateHistory(),
            connected=("web",),
            session_channel="web",
            settings=DEFAULTS,
            tz=SHANGHAI,
            started_at=NOON,
            at=NOON,
        )


# --- Generated inputs --------------------------------------------------------------------------

ZONES = (
    SHANGHAI,
    NEW_YORK,
    BERLIN,
    ZoneInfo("Australia/Sydney"),
    ZoneInfo("Asia/Kolkata"),
    ZoneInfo("UTC"),
)
TRANSITIONS = (
    utc(2026, 3, 8, 7),  # New York spring forward
    utc(2026, 11, 1, 6),  # New York fall back
    utc(2026, 3, 29, 1),  # Berlin spring forward
    utc(2026, 10, 25, 1),  # Berlin fall back
    utc(2026, 4, 4, 16),  # Sydney fall back
    utc(2026, 10, 3, 16),  # Sydney spring forward
)
YEAR_START = utc(2026, 1, 1)
SECONDS_PER_YEAR = 365 * 86400  # seconds
NEAR = 6 * 3600  # seconds either side of a DST change

CHANNEL_NAMES = ("web", "phone", "tg")
CONNECTED_SETS = ((), ("web",), ("phone",), ("web", "phone"), ("tg", "phone"), CHANNEL_NAMES)
MINUTES_PER_DAY = 1440

instants = st.one_of(
    st.integers(0, SECONDS_PER_YEAR - 1).map(lambda s: YEAR_START + timedelta(seconds=s)),
    st.builds(
        lambda t, s: t + timedelta(seconds=s),
        st.sampled_from(TRANSITIONS),
        st.integers(-NEAR, NEAR),
    ),
)
states = st.one_of(
    st.none(),
    st.builds(RoundState, availability=st.sampled_from([None, *Availability])),
)
bodies = st.one_of(
    st.sampled_from([SENT, "good morning 记得吃早饭", "下午记得喝水。", "晚安"]),
    st.text(max_size=20),
)


def _clock(minute: int) -> time:
    return time(minute // 60, minute % 60)


quiet_ranges = (
    st.tuples(st.integers(0, 1439), st.integers(0, 1439))
    .filter(lambda r: r[0] != r[1])
    .map(lambda r: QuietHours(start=_clock(r[0]), end=_clock(r[1])))
)


@st.composite
def gate_inputs(
    draw: st.DrawFn,
    *,
    at: datetime,
    quiet_hours: QuietHours | None,
    urgencies: Sequence[Urgency],
    state_strategy: st.SearchStrategy[RoundState | None],
) -> dict[str, Any]:
    """Keyword arguments for evaluate(), with history placed around `at`."""
    ago = st.integers(0, 3 * 86400).map(lambda s: at - timedelta(seconds=s))
    cfg = GateSettings(
        quiet_hours=quiet_hours,
        quiet_mode=draw(st.sampled_from(["critical_only", "skip"])),
        activity_window=timedelta(minutes=draw(st.integers(0, 30))),
        min_interval=timedelta(minutes=draw(st.integers(0, 240))),
        daily_cap=draw(st.integers(1, 6)),
        max_unanswered=draw(st.integers(1, 4)),
        duplicate_window=timedelta(hours=draw(st.integers(0, 48))),
        default_channel=draw(st.sampled_from([None, *CHANNEL_NAMES, "email"])),
    )
    pushes = draw(
        st.lists(
            st.builds(
                PastPush,
                at=ago,
                body=bodies,
                channel=st.sampled_from([None, *CHANNEL_NAMES]),
            ),
            max_size=3,
        )
    )
    history = GateHistory(
        last_owner_message_at=draw(st.one_of(st.none(), ago)),
        owner_channels=draw(st.lists(st.sampled_from([None, *CHANNEL_NAMES, "email"]), max_size=4)),
        pushes=pushes,
    )
    decision = Decision(
        push=True,
        urgency=draw(st.sampled_from(urgencies)),
        body=draw(bodies),
        channel=draw(st.sampled_from([None, *CHANNEL_NAMES, "email"])),
    )
    return {
        "decision": decision,
        "state": draw(state_strategy),
        "history": history,
        "connected": draw(st.sampled_from(CONNECTED_SETS)),
        "session_channel": draw(st.sampled_from([None, "web"])),
        "settings": cfg,
        "started_at": at - timedelta(seconds=draw(st.integers(0, 3600))),
        "at": at,
    }


@st.composite
def inside_quiet_hours(draw: st.DrawFn) -> tuple[ZoneInfo, datetime, QuietHours]:
    """A zone, an instant and a quiet range built to contain that instant's local time."""
    tz = draw(st.sampled_from(ZONES))
    at = draw(instants)
    wall = at.astimezone(tz)
    minute = wall.hour * 60 + wall.minute
    back = draw(st.integers(0, MINUTES_PER_DAY - 2))  # whole minutes since the range began
    length = draw(st.integers(back + 1, MINUTES_PER_DAY - 1))
    start = (minute - back) % MINUTES_PER_DAY
    end = (start + length) % MINUTES_PER_DAY
    return tz, at, QuietHours(start=_clock(start), end=_clock(end))


@settings(max_examples=250, deadline=None)
@given(case=inside_quiet_hours(), data=st.data())
def test_no_routine_or_warning_push_in_quiet_hours(
    case: tuple[ZoneInfo, datetime, QuietHours], data: st.DataObject
) -> None:
    """No state, history or settings let a non-critical push through quiet hours."""
    tz, at, quiet_hours = case
    assert in_quiet_hours(at, quiet_hours, tz)
    kwargs = data.draw(
        gate_inputs(at=at, quiet_hours=quiet_hours, urgencies=[R, W], state_strategy=states)
    )
    verdict = evaluate(tz=tz, **kwargs)
    assert verdict.outcome is SUPPRESSED
    assert verdict.reason == "quiet_hours"
    assert verdict.channel is None


@settings(max_examples=250, deadline=None)
@given(
    tz=st.sampled_from(ZONES),
    at=instants,
    quiet_hours=st.one_of(st.none(), quiet_ranges),
    data=st.data(),
)
def test_delivery_names_one_connected_channel(
    tz: ZoneInfo, at: datetime, quiet_hours: QuietHours | None, data: st.DataObject
) -> None:
    """A delivered verdict names exactly one channel, and it is a connected one."""
    kwargs = data.draw(
        gate_inputs(at=at, quiet_hours=quiet_hours, urgencies=list(Urgency), state_strategy=states)
    )
    verdict = evaluate(tz=tz, **kwargs)
    if verdict.outcome is DELIVERED:
        assert isinstance(verdict.channel, str)
        assert verdict.channel in kwargs["connected"]
        assert verdict.reason == verdict.channel
    else:
        assert verdict.outcome is SUPPRESSED
        assert verdict.channel is None
    if not kwargs["connected"]:
        assert verdict.outcome is not DELIVERED


@settings(max_examples=250, deadline=None)
@given(
    tz=st.sampled_from(ZONES),
    at=instants,
    quiet_hours=st.one_of(st.none(), quiet_ranges),
    data=st.data(),
)
def test_dnd_stops_every_non_critical_push(
    tz: ZoneInfo, at: datetime, quiet_hours: QuietHours | None, data: st.DataObject
) -> None:
    """With the owner on do-not-disturb, a routine or warning push is never delivered."""
    kwargs = data.draw(
        gate_inputs(at=at, quiet_hours=quiet_hours, urgencies=[R, W], state_strategy=st.just(DND))
    )
    verdict = evaluate(tz=tz, **kwargs)
    assert verdict.outcome is SUPPRESSED
    assert verdict.reason in {"quiet_hours", "unavailable"}


@settings(max_examples=250, deadline=None)
@given(tz=st.sampled_from(ZONES), at=instants, quiet_hours=quiet_ranges)
def test_a_range_and_its_complement_split_every_instant(
    tz: ZoneInfo, at: datetime, quiet_hours: QuietHours
) -> None:
    """Every instant is in exactly one of start-end and end-start, DST nights included."""
    complement = QuietHours(start=quiet_hours.end, end=quiet_hours.start)
    assert in_quiet_hours(at, quiet_hours, tz) != in_quiet_hours(at, complement, tz)


def test_symbol_only_bodies_are_not_all_duplicates() -> None:
    """Bodies of only emoji or punctuation keep their identity."""
    from backthink.decision.gate import normalize_body

    assert normalize_body("😊") != normalize_body("!!!")
    assert normalize_body("😊 ") == normalize_body("😊")


def test_a_new_owner_is_reached_in_the_session_by_default() -> None:
    """No default channel set and no message yet: an auto push goes to the session channel."""
    found, _ = channel_candidates(
        None,
        owner_channels=[],
        connected=["web", "phone"],
        default_channel=None,
        session_channel="web",
    )
    assert found == ["web", "phone"]  # the session first, then whatever else can reach them


@pytest.mark.parametrize(
    ("connected", "owner_channels", "session", "default", "skipped"),
    [
        (["web"], [], "web", None, False),  # the session channel takes an auto push
        (["phone"], ["phone"], None, None, False),  # the owner's own channel does
        (["phone"], [None], "web", None, False),  # the session is away: the phone takes it
        (["phone"], [None], "web", "web", True),  # ... unless the default is the session
        (["phone"], [], None, "email", True),  # a default that cannot deliver now
        ([], [], "web", None, True),  # nothing connected at all
    ],
)
def test_a_round_that_could_reach_no_channel_skips_before_the_model(
    connected: list[str],
    owner_channels: list[str | None],
    session: str | None,
    default: str | None,
    skipped: bool,
) -> None:
    """The pre-gate ends a round skipped/no_route when an auto push would have nowhere to go."""
    verdict = pre_gate(
        settings=GateSettings(quiet_hours="off", default_channel=default),
        tz=ZoneInfo("UTC"),
        connected=connected,
        last_owner_message_at=None,
        at=utc(2026, 11, 30, 12),
        owner_channels=owner_channels,
        session_channel=session,
    )
    assert (verdict is not None and verdict.reason == "no_route") is skipped
