"""`backthink worker`: rounds for many owners from a queue on PostgreSQL (procrastinate).

Start as many workers as the load needs, on one machine or many, all on the
same database; each takes its share of the queue (`backthink.host.queue`).
Under systemd (Type=notify, WatchdogSec=) a worker speaks the notify
protocol as the daemon does.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from backthink.config import Settings
from backthink.host.app import settle_heap
from backthink.host.fleet import open_fleet
from backthink.host.notify import Notifier
from backthink.host.process import on_stop_signals, start_watchdog
from backthink.host.queue import (
    CONTROL_QUEUE,
    HEARTBEAT_S,
    ROUND_QUEUE,
    STALLED_S,
    Queue,
    apply_schema,
    conninfo,
    queue_app,
)

log = structlog.get_logger(__name__)


async def serve(settings: Settings) -> int:
    """Run a worker until SIGTERM or SIGINT; return the exit code.

    Raises:
        ConfigError: the database is not PostgreSQL.
    """
    conninfo(settings.database.url)  # fails early, before anything is opened
    async with open_fleet(settings) as fleet:
        # The sweep schedules from the owner table: the file's owners must be in it.
        await fleet.sync(fleet.clock.now(), strict=True)
        app = queue_app(settings.database.url)
        await apply_schema(fleet.claims)
        async with app.open_async():
            queue = Queue(fleet, fleet.claims, app)
            settle_heap()
            stop = asyncio.Event()
            with on_stop_signals(stop.set):
                await queue.greet(fleet.clock.now())
                worker = asyncio.create_task(
                    app.run_worker_async(
                        queues=[ROUND_QUEUE, CONTROL_QUEUE],
                        concurrency=settings.worker.concurrency,
                        install_signal_handlers=False,
                        delete_jobs="successful",
                        update_heartbeat_interval=HEARTBEAT_S,
                        stalled_worker_timeout=STALLED_S,
                        fetch_job_polling_interval=1.0,
                        shutdown_graceful_timeout=settings.daemon.drain_timeout.total_seconds(),
                        additional_context={"queue": queue},
                    )
                )
                log.info("worker.ready", concurrency=settings.worker.concurrency)
                notifier = Notifier()
                notifier.notify("READY=1", "STATUS=running rounds from the queue")
                pings = start_watchdog(notifier)
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait([worker, stopping], return_when=asyncio.FIRST_COMPLETED)
                notifier.notify("STOPPING=1")
                if pings is not None:
                    pings.cancel()
                if worker.done():
                    stopping.cancel()
                    worker.result()  # raises what stopped it
                    log.error("worker.stopped_by_itself")
                    return 1
                log.info("worker.stopping")
                worker.cancel()  # procrastinate's graceful stop: running rounds finish first
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
    log.info("worker.stopped")
    return 0
