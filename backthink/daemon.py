"""The long-running service: a startup round, then a round every heartbeat."""

from __future__ import annotations

import asyncio
import signal

import structlog

from backthink.app import MODEL_MISSING_HINT, open_app
from backthink.config import Settings

log = structlog.get_logger("backthink.daemon")


async def run_daemon(settings: Settings, *, owner_id: str) -> int:
    """Run until SIGTERM or SIGINT; return the process exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with open_app(settings) as app:
        log.info(
            "daemon.started",
            owner_id=owner_id,
            heartbeat_s=settings.schedule.heartbeat.total_seconds(),
        )
        if app.model is None:
            log.warning("daemon.model_missing", hint=MODEL_MISSING_HINT)
        await app.dispatcher.resume(app.rounds)
        rounds = 0
        if settings.schedule.startup_greeting:
            await app.thinker.run_round(owner_id, "startup")
            rounds += 1
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), settings.schedule.heartbeat.total_seconds())
            except TimeoutError:
                await app.thinker.run_round(owner_id, "heartbeat")
                rounds += 1
        log.info("daemon.stopped", rounds=rounds)
    return 0
