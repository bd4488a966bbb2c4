"""The clocks: the manual one moves only when told; the system one is aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from backthink.clock import ManualClock, SystemClock
from backthink.testing import FAKE_START, FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_manual_clock_moves_only_by_advance_and_set() -> None:
    """now() stays put between calls; advance returns the new instant; set jumps."""
    clock = ManualClock(T0)
    assert clock.now() == clock.now() == T0
    assert clock.advance(timedelta(minutes=5)) == clock.now() == T0 + timedelta(minutes=5)
    clock.set(T0 - timedelta(days=1))
    assert clock.now() == T0 - timedelta(days=1)


def test_a_manual_clock_refuses_a_naive_instant() -> None:
    """An instant without a zone would compare wrongly with every stored time: refused."""
    with pytest.raises(ValueError, match="aware"):
        ManualClock(datetime(2026, 3, 1, 12, 0))  # noqa: DTZ001 - the naive instant under test


def test_the_fake_clock_is_the_manual_clock_with_a_default_instant() -> None:
    """The tests' FakeClock is a ManualClock standing at FAKE_START unless given an instant."""
    assert isinstance(FakeClock(), ManualClock)
    assert FakeClock().now() == FAKE_START
    assert FakeClock(T0).now() == T0


def test_the_system_clock_is_aware_utc() -> None:
    """The system clock's instants carry UTC, never a local zone."""
    assert SystemClock().now().tzinfo is UTC
