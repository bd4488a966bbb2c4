"""Schedule math: when the next heartbeat falls, as pure functions of explicit times.

Inside quiet hours the heartbeat slows to `schedule.quiet_heartbeat`, and the
first heartbeat after quiet hours falls when they end rather than up to a
whole slow interval later. `HeartbeatTrigger` wraps this for APScheduler.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger

from backthink.config import QuietHours, Settings
from backthink.decision.quiet import in_quiet_hours, quiet_end_after
from backthink.models import Trigger


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


def build_scheduler(
    settings: Settings, owners: Sequence[str], job: Callable[[str, str], Awaitable[None]]
) -> AsyncIOScheduler:
    """A scheduler with one heartbeat job per owner (slower in quiet hours) and one per cron line.

    Every job coalesces missed runs, never overlaps itself, and may start up to
    one heartbeat late; a run later than that is dropped, not bunched up.
    `owners` are scheduled with `settings` as they are; the daemon adds each
    owner's jobs with that owner's settings (`add_owner_jobs`).
    """
    grace = max(1, int(settings.schedule.heartbeat.total_seconds()))
    scheduler = AsyncIOScheduler(
        timezone=settings.owner.tz,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": grace},
    )
    for owner in owners:
        add_owner_jobs(scheduler, owner, settings, job)
    return scheduler


def add_owner_jobs(
    scheduler: AsyncIOScheduler,
    owner_id: str,
    settings: Settings,
    job: Callable[[str, str], Awaitable[None]],
    *,
    first: datetime | None = None,
) -> None:
    """Add an owner's heartbeat (first at `first`, default one heartbeat on) and cron jobs.

    Times follow the owner's time zone and quiet hours.
    """
    s = settings.schedule
    tz = settings.owner.tz
    trigger = HeartbeatTrigger(
        heartbeat=s.heartbeat,
        quiet_heartbeat=s.quiet_heartbeat,
        quiet=settings.gate.quiet_hours,
        tz=tz,
        jitter=s.jitter,
    )
    extra: dict[str, Any] = {} if first is None else {"next_run_time": first}
    scheduler.add_job(
        job, trigger, args=(owner_id, Trigger.HEARTBEAT.value), id=f"heartbeat:{owner_id}", **extra
    )
    for i, expr in enumerate(s.cron):
        scheduler.add_job(
            job,
            CronTrigger.from_crontab(expr, timezone=tz),
            args=(owner_id, Trigger.CRON.value),
            id=f"cron:{owner_id}:{i}",
        )


def remove_owner_jobs(scheduler: AsyncIOScheduler, owner_id: str) -> None:
    """Remove an owner's heartbeat and cron jobs."""
    for job in scheduler.get_jobs():
        if job.id == f"heartbeat:{owner_id}" or job.id.startswith(f"cron:{owner_id}:"):
            job.remove()


def next_heartbeat_of(scheduler: AsyncIOScheduler) -> str | None:
    """The soonest heartbeat of any owner (not the owner table's refresh), as `status` shows it."""
    times = [
        job.next_run_time
        for job in scheduler.get_jobs()
        if job.id.startswith("heartbeat:") and job.next_run_time
    ]
    return min(times).astimezone(UTC).isoformat() if times else None
