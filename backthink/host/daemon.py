"""The long-running service: startup greeting, heartbeats, cron triggers, pokes, delivery.

The daemon only decides *when* a round runs; `Thinker.run_round` decides
everything else. APScheduler jobs coalesce, run one instance at a time and
have a misfire grace of one heartbeat, so after a laptop sleep or downtime
the missed heartbeats collapse into at most one round, never a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from backthink.config import Settings
from backthink.delivery.audience import Audience
from backthink.errors import BackthinkError, ConfigError
from backthink.host import poke
from backthink.host.app import MODEL_MISSING_HINT, AppOverrides, settle_heap
from backthink.host.descriptors import quiet_accept_storms, raise_file_limit
from backthink.host.fleet import Fleet, open_fleet
from backthink.host.live import Live, LiveStatus
from backthink.host.notify import Notifier
from backthink.host.process import on_stop_signals, start_watchdog
from backthink.host.schedule import (
    add_owner_jobs,
    build_scheduler,
    next_heartbeat_of,
    phase,
    remove_owner_jobs,
)
from backthink.models import Outcome, Owner, Reason, Trigger
from backthink.records import RoundRecord

log = structlog.get_logger(__name__)


class StoppingError(BackthinkError):
    """The daemon is shutting down and starts no new round."""


class Doors(Protocol):
    """The daemon's open HTTP doors."""

    async def stop(self) -> None:
        """Stop serving; open connections get a short grace."""
        ...


OpenDoors = Callable[[Fleet, list[str], Live], Awaitable[Doors]]
"""Opens the doors over the fleet for its owners (the default one first)."""


class _AllDoors:
    """Several open doors, stopped together."""

    def __init__(self, doors: Sequence[Doors]) -> None:
        self._doors = list(doors)

    async def stop(self) -> None:
        """Stop every door, the last opened first."""
        for door in reversed(self._doors):
            await door.stop()


def all_doors(*openers: OpenDoors) -> OpenDoors:
    """One opener for several doors (the page and the API on different addresses).

    A door that cannot open closes those opened before it.
    """

    async def open_all(fleet: Fleet, owners: list[str], live: Live) -> Doors:
        opened: list[Doors] = []
        try:
            for opener in openers:
                opened.append(await opener(fleet, owners, live))
        except BaseException:
            await _AllDoors(opened).stop()
            raise
        return _AllDoors(opened)

    return open_all


GREETING_MARK = "startup_greeting"
# Reasons of a failed greeting that said nothing to the owner: the greeting is kept.
UNSAID = frozenset({Reason.MODEL_ERROR, Reason.MODEL_TIMEOUT})
RECORD_GRACE_S = 5.0  # seconds a cut-off round gets to record itself, past the busy timeout
OWNER_REFRESH = timedelta(minutes=1)  # how soon an owner added, changed or removed is seen


class Daemon:
    """Schedules rounds for every enabled owner (or the ones given) until asked to stop."""

    def __init__(
        self,
        fleet: Fleet,
        owners: Sequence[str] | None = None,
        *,
        notifier: Notifier | None = None,
        doors: OpenDoors | None = None,
    ) -> None:
        """Serve `owners`, or (None) every enabled owner, following the owner table.

        `doors` opens the daemon's HTTP doors (the page) once it is scheduling.
        """
        self._fleet = fleet
        self._settings = fleet.settings
        self._only = list(owners) if owners is not None else None
        self._owners: list[str] = []  # the default first; poke reads it at every request
        self._scheduled: dict[str, Owner] = {}
        self._notifier = notifier or Notifier()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[RoundRecord]] = set()
        self._outcomes: Counter[str] = Counter()
        self._accepting = True
        # Under overload, due rounds wait for a slot instead of all starting at once
        # and each taking ever longer (and holding memory) while the model is slow.
        self._slots = asyncio.Semaphore(self._settings.daemon.max_concurrent_rounds)
        self._scheduler: AsyncIOScheduler | None = None
        self._open_doors = doors

    def request_stop(self) -> None:
        """Stop taking new rounds and begin shutting down (SIGTERM, SIGINT)."""
        self._stop.set()

    async def run_round(self, owner_id: str, trigger: str) -> RoundRecord:
        """Run one round as a tracked task, so shutdown can wait for it.

        Raises:
            StoppingError: the daemon is shutting down and takes no new round.
            BackthinkError: the owner's app cannot be wired (no such owner, bad
                settings, the database unreadable); no round started.
        """
        if not self._accepting:
            raise StoppingError("the daemon is stopping")
        async with self._slots:
            if not self._accepting:
                raise StoppingError("the daemon is stopping")
            app = await self._fleet.app(owner_id)
            task = asyncio.create_task(app.thinker.run_round(owner_id, trigger))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            record = await asyncio.shield(task)
        self._outcomes[record.outcome.value] += 1
        return record

    def status(self, owner_id: str) -> LiveStatus:
        """What only the running daemon knows: the next heartbeat, the channels, the turns."""
        job = self._scheduler.get_job(f"heartbeat:{owner_id}") if self._scheduler else None
        at = job.next_run_time if job is not None else None
        app = self._fleet.cached(owner_id)
        audience = self._fleet.audience
        watched = audience.present(owner_id, self._fleet.clock.now()) if audience else None
        health = app.dispatcher.health() if app is not None else {}
        turns = self._fleet.turns.in_flight(owner_id).to_json()
        relay = self._fleet.turns.relay_summary(owner_id) if self._settings.api.listen else {}
        return LiveStatus(at, health, watched, turns, relay)

    async def _job(self, owner_id: str, trigger: str) -> None:
        """A scheduled round; one that cannot start is logged and recorded, never dropped."""
        if not self._accepting:
            return
        try:
            await self.run_round(owner_id, trigger)
        except StoppingError:
            pass  # a job still waiting for a slot when shutdown begins simply does not run
        except BackthinkError as exc:
            log.error(
                "daemon.round_not_started", owner_id=owner_id, trigger=trigger, error=str(exc)
            )
            await self._fleet.record_unstarted(owner_id, trigger, exc)

    async def _greet(self, owner_id: str) -> None:
        """The startup round, at most once per `schedule.startup_cooldown` across restarts."""
        app = await self._fleet.app(owner_id)
        marks = app.marks
        now = app.clock.now()
        last = await marks.marked_at(owner_id, GREETING_MARK)
        cooldown = self._settings.schedule.startup_cooldown
        if last is not None and now - last < cooldown:
            log.info(
                "daemon.greeting_skipped",
                owner_id=owner_id,
                reason="greeted_recently",
                last_greeting_s_ago=round((now - last).total_seconds()),
            )
            return
        if app.model is None:
            # Without a model the round is skipped and spends nothing: the greeting is
            # kept for the first start that has a model to say it with.
            log.info("daemon.greeting_waits", owner_id=owner_id, reason="no_model")
            await self.run_round(owner_id, Trigger.STARTUP.value)
            return
        # The mark is written before the round, so a restart storm that kills the
        # process mid-round still cannot greet (or spend tokens) again.
        await marks.mark(owner_id, GREETING_MARK, now)
        record = await self.run_round(owner_id, Trigger.STARTUP.value)
        if record.outcome is Outcome.FAILED and record.reason in UNSAID:
            # The endpoint never answered (a typo in its URL, a server down): nothing was
            # said, so the greeting waits for the next start, as it does without a model.
            if last is None:
                await marks.clear(owner_id, GREETING_MARK)
            else:
                await marks.mark(owner_id, GREETING_MARK, last)
            log.info("daemon.greeting_waits", owner_id=owner_id, reason=str(record.reason))

    async def _greet_all(self, owners: Sequence[str]) -> None:
        for owner_id in owners:
            try:
                await self._greet(owner_id)
            except BackthinkError as exc:
                log.warning("daemon.greeting_failed", owner_id=owner_id, error=str(exc))

    async def _enabled(self) -> list[Owner]:
        """The owners to serve now: the enabled ones, or those of them asked for."""
        owners = await self._fleet.owners()
        if self._only is not None:
            owners = [o for o in owners if o.id in self._only]
        # The default owner first: a poke without owner_id is for it.
        return sorted(owners, key=lambda o: (o.id != self._settings.owner.id, o.id))

    def _follow(self, owners: Sequence[Owner], now: datetime) -> None:
        """Add, replace and remove heartbeat and cron jobs so they match `owners`."""
        scheduler = self._scheduler
        assert scheduler is not None
        wanted = {o.id: o for o in owners}
        for owner_id in [k for k in self._scheduled if wanted.get(k) != self._scheduled[k]]:
            remove_owner_jobs(scheduler, owner_id)
            del self._scheduled[owner_id]
        spread = len(wanted) > 1
        for owner_id, owner in wanted.items():
            if owner_id in self._scheduled:
                continue
            try:
                settings = self._fleet.settings_for(owner)
            except BackthinkError as exc:
                log.warning("daemon.owner_unscheduled", owner_id=owner_id, error=str(exc))
                continue
            first = now + settings.schedule.heartbeat * (phase(owner_id) if spread else 1.0)
            add_owner_jobs(scheduler, owner_id, settings, self._job, first=first)
            self._scheduled[owner_id] = owner
        self._owners[:] = [o.id for o in owners if o.id in self._scheduled]

    async def _refresh(self) -> None:
        """Follow the owner table: owners added, changed, disabled or removed."""
        try:
            owners = await self._enabled()
        except BackthinkError as exc:
            log.warning("daemon.owners_unreadable", error=str(exc))
            return
        before = set(self._scheduled)
        self._follow(owners, datetime.now(UTC))
        added = set(self._scheduled) - before
        if added or before - set(self._scheduled):
            log.info("daemon.owners_changed", owners=len(self._scheduled), added=len(added))
        if added and self._settings.schedule.startup_greeting:
            await self._greet_all(sorted(added))

    async def run(self) -> int:
        """Run until `request_stop`; return the exit code."""
        s = self._settings
        # The socket first: a second daemon on the same config is refused before it
        # says it started, or resumes (and sends) the first one's deliveries.
        server = await poke.serve(s.daemon.socket, self.run_round, self._owners, status=self.status)
        owners = await self._enabled()
        model = self._fleet.model
        first = await self._fleet.app(owners[0].id) if owners else None
        log.info(
            "daemon.started",
            owners=len(owners),
            heartbeat_s=s.schedule.heartbeat.total_seconds(),
            quiet_heartbeat_s=s.schedule.quiet_heartbeat.total_seconds(),
            cron=s.schedule.cron or None,
            # Every configured channel, and those that could deliver this instant: with the
            # API on, the session channel connects only once a client watches it.
            channels=list(s.channels),
            connected=first.thinker.connected() if first is not None else [],
            model=s.model.name if model else None,
        )
        if model is None:
            log.warning("daemon.model_missing", hint=MODEL_MISSING_HINT)
        await self._fleet.resume(self._fleet.clock.now())
        scheduler = self._scheduler = build_scheduler(s, [], self._job)
        self._follow(owners, datetime.now(UTC))
        doors = (
            await self._open_doors(self._fleet, list(self._owners), self.status)
            if self._open_doors is not None and self._owners
            else None
        )
        scheduler.add_job(
            self._refresh,
            "interval",
            seconds=OWNER_REFRESH.total_seconds(),
            id="owners",
        )
        scheduler.start()
        helpers: list[asyncio.Task[None]] = []
        if (pings := start_watchdog(self._notifier)) is not None:
            helpers.append(pings)
        if s.schedule.startup_greeting:
            helpers.append(asyncio.create_task(self._greet_all(list(self._owners))))
        self._notifier.notify("READY=1", "STATUS=thinking on a heartbeat")
        log.info(
            "daemon.ready", socket=str(s.daemon.socket), next_heartbeat=next_heartbeat_of(scheduler)
        )

        await self._stop.wait()
        self._accepting = False
        self._notifier.notify("STOPPING=1")
        log.info("daemon.stopping", running_rounds=len(self._tasks))
        scheduler.shutdown(wait=False)
        server.close()
        if doors is not None:
            await doors.stop()
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


async def run_daemon(
    settings: Settings, *, owners: Sequence[str] | None = None, doors: OpenDoors | None = None
) -> int:
    """Open the fleet, run the daemon under SIGTERM/SIGINT handling, return the exit code.

    `owners` limits it to those owners; None serves every enabled owner.
    `doors` opens the HTTP doors the configuration asks for.

    Raises:
        ConfigError: the page would listen beyond loopback without a token, or
            the API without any owner's token.
    """
    settings.web.check_serving()
    files = raise_file_limit()
    quiet_accept_storms(asyncio.get_running_loop())
    log.info("daemon.files", limit=files)
    # The API's clients, whom every owner's dispatcher asks whether the session
    # channel is watched; without the API it is always connected.
    audience = Audience(settings.api.seen_window) if settings.api.listen else None
    async with open_fleet(settings, AppOverrides(audience=audience)) as fleet:
        public = settings.api.listen and not settings.api.loopback
        if public and not await fleet.tokens.any():
            raise ConfigError(
                f"api.listen {settings.api.listen!r} is not a loopback address and no owner "
                "has a token: run `backthink owners token ID` first"
            )
        settle_heap()
        daemon = Daemon(fleet, owners, doors=doors)
        with on_stop_signals(daemon.request_stop):
            return await daemon.run()
