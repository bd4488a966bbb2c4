"""Schedule math as pure functions of explicit times, and the scheduler's misfire policy."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from backthink.config import QuietHours, Settings
from backthink.host.schedule import (
    HeartbeatTrigger,
    build_scheduler,
    next_heartbeat,
    quiet_end_after,
)

SH = ZoneInfo("Asia/Shanghai")
NY = ZoneInfo("America/New_York")
QUIET = QuietHours.parse("23:00-07:00")
HB = timedelta(minutes=30)
SLOW = timedelta(hours=2)


def local(tz: ZoneInfo, *args: int) -> datetime:
    return datetime(*args, tzinfo=tz)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (local(SH, 2026, 11, 30, 12, 0), local(SH, 2026, 11, 30, 12, 30)),
        (local(SH, 2026, 11, 30, 22, 45), local(SH, 2026, 11, 30, 23, 15)),
        (local(SH, 2026, 11, 30, 23, 15), local(SH, 2026, 12, 1, 1, 15)),
        (local(SH, 2026, 12, 1, 5, 30), local(SH, 2026, 12, 1, 7, 0)),
        (local(SH, 2026, 12, 1, 6, 59), local(SH, 2026, 12, 1, 7, 0)),
        (local(SH, 2026, 12, 1, 7, 0), local(SH, 2026, 12, 1, 7, 30)),
    ],
    ids=["day", "into-quiet", "quiet-slow", "clamped-to-end", "just-before-end", "at-end"],
)
def test_next_heartbeat(previous: datetime, expected: datetime) -> None:
    """Heartbeats slow down in quiet hours and resume when they end."""
    got = next_heartbeat(previous, heartbeat=HB, quiet_heartbeat=SLOW, quiet=QUIET, tz=SH)
    assert got == expected


def test_no_quiet_hours_is_plain_interval() -> None:
    """Without quiet hours every step is one heartbeat."""
    at = local(SH, 2026, 11, 30, 3, 0)
    assert next_heartbeat(at, heartbeat=HB, quiet_heartbeat=SLOW, quiet=None, tz=SH) == at + HB


def test_quiet_end_across_dst() -> None:
    """The end of quiet hours is 07:00 local on the nights New York's clocks move."""
    spring = local(NY, 2026, 3, 8, 1, 30)
    fall = local(NY, 2026, 11, 1, 1, 30)
    assert quiet_end_after(spring, QUIET, NY).astimezone(UTC) == datetime(
        2026, 3, 8, 11, 0, tzinfo=UTC
    )
    assert quiet_end_after(fall, QUIET, NY).astimezone(UTC) == datetime(
        2026, 11, 1, 12, 0, tzinfo=UTC
    )


def test_trigger_jitter_is_bounded() -> None:
    """The trigger adds at most `jitter` to the heartbeat, never less than zero."""
    trigger = HeartbeatTrigger(
        heartbeat=HB,
        quiet_heartbeat=SLOW,
        quiet=QUIET,
        tz=SH,
        jitter=timedelta(minutes=2),
        rng=random.Random(7),
    )
    prev = local(SH, 2026, 11, 30, 12, 0)
    for _ in range(200):
        nxt = trigger.get_next_fire_time(prev, prev)
        assert prev + HB <= nxt <= prev + HB + timedelta(minutes=2)
    first = trigger.get_next_fire_time(None, prev)
    assert prev + HB <= first <= prev + HB + timedelta(minutes=2)


PROMPTS = str(Path(__file__).resolve().parent.parent / "backthink/prompts")


async def test_missed_heartbeats_collapse_into_one_run() -> None:
    """After downtime, a burst of missed heartbeats runs once (coalesce, grace, one instance)."""
    settings = Settings.model_validate(
        {
            "schedule": {"heartbeat": "1s", "jitter": "0s", "cron": ["0 9 * * *"]},
            "gate": {"quiet_hours": ""},
            "prompt": {"dir": PROMPTS},
        }
    )
    runs: list[tuple[str, str]] = []
    ran = asyncio.Event()

    async def job(owner: str, trigger: str) -> None:
        runs.append((owner, trigger))
        ran.set()

    scheduler = build_scheduler(settings, ["a"], job)
    scheduler.start(paused=True)
    try:
        jobs = {job.id: job for job in scheduler.get_jobs()}
        assert set(jobs) == {"heartbeat:a", "cron:a:0"}
        for job_ in jobs.values():
            assert (job_.coalesce, job_.max_instances, job_.misfire_grace_time) == (True, 1, 1)
        # As if the machine slept through twenty heartbeats: the next run time is long past.
        past = datetime.now(UTC) - timedelta(seconds=20.5)
        scheduler.modify_job("heartbeat:a", next_run_time=past)
        scheduler.resume()
        async with asyncio.timeout(5):
            await ran.wait()
        # Nothing else is due for another heartbeat: a burst would show up right away.
        await asyncio.sleep(0.3)
        assert runs == [("a", "heartbeat")]
    finally:
        scheduler.shutdown(wait=False)
