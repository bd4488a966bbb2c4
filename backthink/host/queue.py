"""The queue of rounds on PostgreSQL (procrastinate): its tasks, and what they do.

Start as many workers as the load needs, on one machine or many, all on the
same database; each takes its share. Three tasks:

- `sweep`, a periodic task every `SWEEP_S` seconds (procrastinate defers each
  tick once across all workers): in one transaction it claims the owners
  whose heartbeat is due (row locks with SKIP LOCKED, so two sweeps never
  claim the same owner), moves each one's next due time along its own
  schedule (time zone, quiet hours), and defers one `round` job per owner.
  The jobs commit with the claim or not at all.
- `round` runs one owner's round. Every round job of an owner carries the
  lock `owner:ID`, so procrastinate never runs two of them at once anywhere.
  The round id is derived from the job's slot (`hb:ID:DUE`, `greet:ID:AT`,
  `poke:ID:UUID`): a job run again after its worker died records and
  delivers its round once.
- `reap`, every `REAP_S` seconds, puts back the round jobs of workers that
  stopped sending heartbeats (killed, frozen, cut off).

A queueing lock is kept off round jobs on purpose: with retries it can wedge
a job in `doing` for good, and it would drop the slot behind a retried one.
The startup greeting goes once per owner per `schedule.startup_cooldown`
across all workers (an atomic claim in the owner table).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import procrastinate
import structlog
from procrastinate import jobs
from sqlalchemy.engine import make_url

from backthink.config import Settings
from backthink.errors import BackthinkError, ConfigError, InputError
from backthink.host.app import AppOverrides
from backthink.host.fleet import Fleet, open_fleet
from backthink.host.poke import trigger_problem
from backthink.host.schedule import next_heartbeat, phase
from backthink.host.witness import ask_daemon
from backthink.models import Owner, Trigger
from backthink.records import RoundRecord
from backthink.store.claims import Claim, OwnerClaims

log = structlog.get_logger(__name__)

SWEEP_S = 2  # seconds between sweeps for due owners
REAP_S = 5  # seconds between looks for round jobs of dead workers
HEARTBEAT_S = 2.0  # how often a worker tells the database it is alive
STALLED_S = 8.0  # a worker silent this long is dead; its jobs go back in the queue
MAX_ATTEMPTS = 3  # runs of one round job before it is given up (and recorded failed)
SWEEP_BATCH = 2_000  # owners claimed in one transaction
ROUND_QUEUE = "rounds"
CONTROL_QUEUE = "control"
ROUND_TASK, SWEEP_TASK, REAP_TASK = "backthink.round", "backthink.sweep", "backthink.reap"
_SLOTS = uuid.UUID("5f0c3e1e-7a53-4b9c-9d55-b5e5f0b1c001")  # namespace of round ids


def round_id_of(key: str) -> str:
    """The round id of a queued slot: the same for every run of that slot's job."""
    return uuid.uuid5(_SLOTS, key).hex


def conninfo(url: str) -> str:
    """The libpq connection string of a `postgresql[+driver]://` database URL.

    Raises:
        ConfigError: the database is not PostgreSQL.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigError(
            "backthink worker needs PostgreSQL: set database.url to postgresql+psycopg://… "
            "(SQLite serves the one-machine daemon, `backthink run`)"
        )
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def queue_app(url: str) -> procrastinate.App:
    """A procrastinate app over the database, with backthink's tasks registered on it.

    Each call registers the tasks anew on a new app (procrastinate's
    blueprints rename their tasks when added, so they serve one app only).
    """
    connector = procrastinate.PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=8)
    app = procrastinate.App(connector=connector, periodic_defaults={"max_delay": 60})
    app.task(name=ROUND_TASK, queue=ROUND_QUEUE, pass_context=True)(_round)
    periodic = [(SWEEP_TASK, SWEEP_S, _sweep), (REAP_TASK, REAP_S, _reap)]
    for name, every_s, fn in periodic:
        task = app.task(name=name, queue=CONTROL_QUEUE, queueing_lock=name, pass_context=True)(fn)
        app.periodic(cron=f"* * * * * */{every_s}", periodic_id=name)(task)
    return app


class Queue:
    """What the tasks work with: the fleet of owners, the engine, the queue itself."""

    def __init__(self, fleet: Fleet, claims: OwnerClaims, app: procrastinate.App) -> None:
        """Serve the fleet's owners from the queue of `app`, claiming them through `claims`."""
        self.fleet = fleet
        self.claims = claims
        self.app = app

    def _settings_of(self, owner: Owner) -> Settings:
        """The owner's schedule settings; the global ones for an owner whose settings fail."""
        try:
            return self.fleet.settings_for(owner)
        except ConfigError as exc:
            log.warning("worker.owner_settings_invalid", owner_id=owner.id, error=str(exc))
            return self.fleet.settings

    def next_due(self, owner: Owner, due: datetime, at: datetime) -> datetime:
        """The owner's heartbeat after `due`, along its own quiet hours; never at or before `at`."""
        s = self._settings_of(owner)
        following = next_heartbeat(
            due,
            heartbeat=s.schedule.heartbeat,
            quiet_heartbeat=s.schedule.quiet_heartbeat,
            quiet=s.gate.quiet_hours,
            tz=s.owner.tz,
        )
        # Far behind (every worker was down): the missed slots are dropped, not run in a burst.
        return following if following > at else at + s.schedule.heartbeat

    def first_due(self, owner: Owner, at: datetime) -> datetime:
        """A new owner's first heartbeat: spread over one interval by its id."""
        return at + self._settings_of(owner).schedule.heartbeat * phase(owner.id)

    def _rounds(self, owner_id: str) -> jobs.JobDeferrer:
        """A deferrer of round jobs under the owner's lock."""
        return self.app.tasks[ROUND_TASK].configure(lock=f"owner:{owner_id}", queue=ROUND_QUEUE)

    def _job(self, owner_id: str, trigger: str, key: str, due: datetime | None) -> jobs.Job:
        deferrer = self._rounds(owner_id)
        scheduled = due.astimezone(UTC).isoformat() if due is not None else None
        return deferrer.make_new_job(
            owner_id=owner_id, trigger=trigger, key=key, scheduled_for=scheduled
        )

    async def sweep(self, at: datetime) -> int:
        """Claim the owners due at `at` and defer their rounds, in one transaction each batch."""
        deferred = 0
        while True:
            count = await self._sweep_batch(at)
            deferred += count
            if count < SWEEP_BATCH:
                return deferred

    async def _sweep_batch(self, at: datetime) -> int:
        when = at.astimezone(UTC)
        async with self.claims.due(when, limit=SWEEP_BATCH) as (rows, claim):
            queued: list[jobs.Job] = []
            for row in rows:
                owner, due = row.owner, row.due
                if owner is None:
                    # Not scheduled until the row is mended, and not claimed every sweep.
                    claim.move(row.id, when + self.fleet.settings.schedule.heartbeat)
                    continue
                if due is None:
                    claim.move(owner.id, self.first_due(owner, when))
                    continue
                claim.move(owner.id, self.next_due(owner, due, when))
                key = f"hb:{owner.id}:{due.astimezone(UTC).isoformat()}"
                queued.append(self._job(owner.id, Trigger.HEARTBEAT.value, key, due))
            await self._defer(claim, queued)
        if queued:
            log.info("worker.swept", deferred=len(queued))
        return len(rows)

    async def _defer(self, claim: Claim, queued: list[jobs.Job]) -> None:
        """Queue jobs in one INSERT on the claim's connection: they commit with it or not at all."""
        if queued:
            await self.app.job_manager.batch_defer_jobs_async(
                queued, connection=await claim.driver_connection()
            )

    async def greet(self, at: datetime) -> int:
        """Defer the startup greeting of every owner not greeted within the cooldown.

        The claim and the jobs commit together: of workers starting at once,
        one greets each owner.
        """
        s = self.fleet.settings.schedule
        if not s.startup_greeting:
            return 0
        when = at.astimezone(UTC)
        async with self.claims.greetings(when, cooldown=s.startup_cooldown) as (owners, claim):
            queued = [
                self._job(o, Trigger.STARTUP.value, f"greet:{o}:{when.isoformat()}", None)
                for o in owners
            ]
            await self._defer(claim, queued)
        log.info("worker.greetings", owners=len(owners))
        return len(owners)

    async def poke(self, owner_id: str, trigger: str) -> str:
        """Queue a round for `owner_id` now with `trigger`; return its round id."""
        key = f"poke:{owner_id}:{uuid.uuid4().hex}"
        await self._rounds(owner_id).defer_async(
            owner_id=owner_id, trigger=trigger, key=key, scheduled_for=None
        )
        return round_id_of(key)

    async def run(
        self, owner_id: str, trigger: str, key: str, scheduled_for: str | None
    ) -> RoundRecord | None:
        """Run a queued round once: a slot already recorded is done, one half-done is finished."""
        round_id = round_id_of(key)
        with structlog.contextvars.bound_contextvars(owner_id=owner_id, round_id=round_id):
            try:
                app = await self.fleet.app(owner_id)
            except BackthinkError as exc:
                log.warning("worker.owner_gone", error=str(exc))
                return None
            if await app.rounds.get(round_id) is not None:
                log.debug("worker.round_already_recorded")
                return None
            if await app.outbox.get(round_id) is not None:
                # Its worker died between handing the message over and the record.
                await app.thinker.resume(owner_id=owner_id)
                return await app.rounds.get(round_id)
            due = datetime.fromisoformat(scheduled_for) if scheduled_for else None
            await ask_daemon(self.fleet, app, owner_id)
            return await app.thinker.run_round(
                owner_id, trigger, round_id=round_id, scheduled_for=due
            )

    async def reap(self) -> int:
        """Put round jobs of dead workers back in the queue; give up after MAX_ATTEMPTS."""
        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(
            queue=ROUND_QUEUE, seconds_since_heartbeat=STALLED_S
        )
        count = 0
        for job in stalled:
            if job.attempts + 1 < MAX_ATTEMPTS:
                await manager.retry_job(job)
                log.warning("worker.round_requeued", job_id=job.id, attempts=job.attempts + 1)
            else:
                await manager.finish_job(job, status=jobs.Status.FAILED, delete_job=False)
                log.error("worker.round_given_up", job_id=job.id, attempts=job.attempts + 1)
            count += 1
        return count


async def _round(
    context: procrastinate.JobContext,
    owner_id: str,
    trigger: str,
    key: str,
    scheduled_for: str | None = None,
) -> None:
    """One owner's round (see `Queue.run`)."""
    queue: Queue = context.additional_context["queue"]
    await queue.run(owner_id, trigger, key, scheduled_for)


async def _sweep(context: procrastinate.JobContext, timestamp: int) -> None:
    """Defer the rounds of every owner due now."""
    queue: Queue = context.additional_context["queue"]
    await queue.sweep(queue.fleet.clock.now())


async def _reap(context: procrastinate.JobContext, timestamp: int) -> None:
    """Put back the rounds of dead workers."""
    queue: Queue = context.additional_context["queue"]
    await queue.reap()


async def apply_schema(claims: OwnerClaims) -> None:
    """Create procrastinate's tables once, whichever worker starts first."""
    if await claims.install_queue(procrastinate.schema.SchemaManager.get_schema()):
        log.info("worker.schema_applied")


POKE_POLL_S = 0.5  # seconds between looks for a queued poke's record


async def poke_queued(
    settings: Settings, owner_id: str | None, trigger: str, *, timeout_s: float
) -> RoundRecord:
    """Queue a round for the owner now, with `trigger`, and wait for a worker to record it.

    Raises:
        InputError: no enabled owner has this id.
        BackthinkError: no worker recorded the round in time (it stays queued).
    """
    trigger = trigger.strip()
    problem = trigger_problem(trigger)
    if problem is not None:
        raise InputError(problem)
    async with open_fleet(settings, AppOverrides(model=None)) as fleet:
        owner = owner_id or await fleet.default_owner()
        await fleet.owner(owner)
        app = queue_app(settings.database.url)
        async with app.open_async():
            round_id = await Queue(fleet, fleet.claims, app).poke(owner, trigger)
        rounds = (await fleet.app(owner)).rounds
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (record := await rounds.get(round_id)) is None:
            if loop.time() >= deadline:
                raise BackthinkError(
                    f"no worker recorded the poke within {timeout_s:.0f}s; "
                    f"it stays queued (round {round_id})"
                )
            await asyncio.sleep(POKE_POLL_S)
        return record
