"""The long-running service: startup greeting, heartbeats, cron triggers, pokes, delivery.

The daemon only decides *when* a round runs; `Thinker.run_round` decides
everything else. APScheduler jobs coalesce, run one instance at a time and
have a misfire grace of one heartbeat, so after a laptop sleep or downtime
the missed heartbeats collapse into at most one round, never a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, timedelta
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from backthink import poke
from backthink.app import MODEL_MISSING_HINT, App, open_app, settle_heap
from backthink.config import Settings
from backthink.errors import BackthinkError
from backthink.models import RoundRecord, Trigger
from backthink.schedule import HeartbeatTrigger
from backthink.systemd import Notifier

log = structlog.get_logger("backthink.daemon")

GREETING_MARK = "startup_greeting"
RECORD_GRACE_S = 5.0  # seconds a cut-off round gets to record itself, past the busy timeout


class Daemon:
    """Schedules rounds for a set of owners until asked to stop."""

    def __init__(
        self, app: App, owners: Sequence[str], *, notifier: Notifier | None = None
    ) -> None:
        self._app = app
        self._settings = app.settings
        self._owners = list(owners)
        self._notifier = notifier or Notifier()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[RoundRecord]] = set()
        self._outcomes: Counter[str] = Counter()
        self._accepting = True
        # Under overload, due rounds wait for a slot instead of all starting at once
        # and each taking ever longer (and holding memory) while the model is slow.
        self._slots = asyncio.Semaphore(app.settings.daemon.max_concurrent_rounds)
        self._scheduler: AsyncIOScheduler | None = None

    def request_stop(self) -> None:
        """Stop taking new rounds and begin shutting down (SIGTERM, SIGINT)."""
        self._stop.set()

    async def run_round(self, owner_id: str, trigger: str) -> RoundRecord:
        """Run one round as a tracked task, so shutdown can wait for it."""
        if not self._accepting:
            raise BackthinkError("the daemon is stopping")
        async with self._slots:
            if not self._accepting:
                raise BackthinkError("the daemon is stopping")
            task = asyncio.create_task(self._app.thinker.run_round(owner_id, trigger))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            record = await asyncio.shield(task)
        self._outcomes[record.outcome.value] += 1
        return record

    def status(self, owner_id: str) -> dict[str, Any]:
        """What only the running daemon knows: the owner's next heartbeat, the channels' health."""
        job = self._scheduler.get_job(f"heartbeat:{owner_id}") if self._scheduler else None
        at = job.next_run_time if job is not None else None
        return {
            "next_heartbeat": at.astimezone(UTC).isoformat() if at is not None else None,
            "channels": self._app.dispatcher.health(),
        }

    async def _job(self, owner_id: str, trigger: str) -> None:
        if self._accepting:
            # A job still waiting for a slot when shutdown begins simply does not run.
            with contextlib.suppress(BackthinkError):
                await self.run_round(owner_id, trigger)

    async def _greet(self, owner_id: str) -> None:
        """The startup round, at most once per `schedule.startup_cooldown` across restarts."""
        rounds = self._app.rounds
        now = self._app.clock.now()
        last = await rounds.marked_at(owner_id, GREETING_MARK)
        cooldown = self._settings.schedule.startup_cooldown
        if last is not None and now - last < cooldown:
            log.info(
                "daemon.greeting_skipped",
                owner_id=owner_id,
                reason="greeted_recently",
                last_greeting_s_ago=round((now - last).total_seconds()),
            )
            return
        # The mark is written before the round, so a restart storm that kills the
        # process mid-round still cannot greet (or spend tokens) again.
        await rounds.mark(owner_id, GREETING_MARK, now)
        await self.run_round(owner_id, Trigger.STARTUP.value)

    async def _watchdog(self, interval_s: float) -> None:
        # Pinged from the event loop itself: a blocked loop stops the pings and
        # systemd restarts the service.
        while True:
            self._notifier.notify("WATCHDOG=1")
            await asyncio.sleep(interval_s)

    async def run(self) -> int:
        """Run until `request_stop`; return the exit code."""
        s = self._settings
        log.info(
            "daemon.started",
            owners=len(self._owners),
            heartbeat_s=s.schedule.heartbeat.total_seconds(),
            quiet_heartbeat_s=s.schedule.quiet_heartbeat.total_seconds(),
            cron=s.schedule.cron or None,
            channels=self._app.thinker.connected(),
            model=s.model.name if self._app.model else None,
        )
        if self._app.model is None:
            log.warning("daemon.model_missing", hint=MODEL_MISSING_HINT)
        await self._app.thinker.resume()
        server = await poke.serve(s.daemon.socket, self.run_round, self._owners, status=self.status)
        web = None
        if s.web.listen:
            # Imported here: without [web] listen the daemon never loads the page's modules.
            from backthink.web import start_web

            web = await start_web(self._app, self._owners[0], live=self.status)
        scheduler = self._scheduler = build_scheduler(s, self._owners, self._job)
        scheduler.start()
        helpers: list[asyncio.Task[None]] = []
        if (interval := self._notifier.watchdog_interval_s) is not None:
            helpers.append(asyncio.create_task(self._watchdog(interval)))
        if s.schedule.startup_greeting:
            helpers.extend(asyncio.create_task(self._greet(owner)) for owner in self._owners)
        self._notifier.notify("READY=1", "STATUS=thinking on a heartbeat")
        log.info("daemon.ready", socket=str(s.daemon.socket), next_heartbeat=_next_run(scheduler))

        await self._stop.wait()
        self._accepting = False
        self._notifier.notify("STOPPING=1")
        log.info("daemon.stopping", running_rounds=len(self._tasks))
        scheduler.shutdown(wait=False)
        server.close()
        if web is not None:
            await web.stop()
        drained = await self._drain(s.daemon.drain_timeout)
        for task in helpers:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*helpers, return_exceptions=True)
        await server.wait_closed()
        s.daemon.socket.unlink(missing_ok=True)
        log.info(
            "daemon.stopped",
            rounds=sum(self._outcomes.values()),
            outcomes=dict(self._outcomes) or None,
            drained=drained,
        )
        return 0

    async def _drain(self, limit: timedelta) -> bool:
        """Wait a bounded time for running rounds; cancel what is left."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=limit.total_seconds())
        for task in pending:
            # A cancelled round records itself failed/interrupted; a committed outbox
            # row stays, and the next start resumes its delivery.
            task.cancel()
        if pending:
            # Long enough for the record to wait out a busy database, then the spill.
            grace = self._settings.database.busy_timeout.total_seconds() + RECORD_GRACE_S
            await asyncio.wait(pending, timeout=grace)
        return not pending


def build_scheduler(
    settings: Settings, owners: Sequence[str], job: Callable[[str, str], Awaitable[None]]
) -> AsyncIOScheduler:
    """One heartbeat job per owner (slower in quiet hours) and one job per cron line.

    Every job coalesces missed runs, never overlaps itself, and may start up to
    one heartbeat late; a run later than that is dropped, not bunched up.
    """
    s = settings.schedule
    tz = settings.owner.tz
    grace = max(1, int(s.heartbeat.total_seconds()))
    scheduler = AsyncIOScheduler(
        timezone=tz,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": grace},
    )
    for owner in owners:
        trigger = HeartbeatTrigger(
            heartbeat=s.heartbeat,
            quiet_heartbeat=s.quiet_heartbeat,
            quiet=settings.gate.quiet_hours,
            tz=tz,
            jitter=s.jitter,
        )
        scheduler.add_job(
            job, trigger, args=(owner, Trigger.HEARTBEAT.value), id=f"heartbeat:{owner}"
        )
        for i, expr in enumerate(s.cron):
            scheduler.add_job(
                job,
                CronTrigger.from_crontab(expr, timezone=tz),
                args=(owner, Trigger.CRON.value),
                id=f"cron:{owner}:{i}",
            )
    return scheduler


def _next_run(scheduler: AsyncIOScheduler) -> str | None:
    times = [job.next_run_time for job in scheduler.get_jobs() if job.next_run_time]
    return min(times).isoformat() if times else None


async def run_daemon(settings: Settings, *, owners: Sequence[str]) -> int:
    """Open the app, run the daemon under SIGTERM/SIGINT handling, return the exit code.

    Raises:
        ConfigError: the page would listen beyond loopback without a token.
    """
    settings.web.check_serving()
    async with open_app(settings) as app:
        settle_heap()
        daemon = Daemon(app, owners)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.request_stop)
        try:
            return await daemon.run()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
