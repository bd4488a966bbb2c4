"""File descriptors: the daemon's limit raised as far as it may go, and accept storms logged once.

When descriptors run out anyway, the event loop fails each accept of a
listening socket and reports every failure (Python 3.11 reports one per
queued connection, on every try): hundreds of thousands of lines in
seconds, which fill the journal and cost the loop the time the rounds need.
Those reports are counted here and logged at most once a minute.
"""

from __future__ import annotations

import asyncio
import os
import resource
from typing import Any, Final

import structlog

log = structlog.get_logger(__name__)

STORM_LOG_S: Final = 60.0  # seconds between two log lines about one kind of storm
ACCEPT_FAILED: Final = "socket.accept() out of system resource"
"""The message asyncio reports a failed accept with (EMFILE, ENFILE, ENOBUFS, ENOMEM)."""
WANTED_FILES: Final = 65_536  # descriptors asked for when the hard limit is unlimited


class StormLog:
    """Counts events of one kind and logs them at most once every `STORM_LOG_S` seconds."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._count = 0
        self._logged_at: float | None = None

    def note(self, now: float, **fields: Any) -> None:
        """Count one event at monotonic time `now`; log the count when a line is due."""
        self._count += 1
        if self._logged_at is not None and now - self._logged_at < STORM_LOG_S:
            return
        log.warning(self._event, count=self._count, window_s=STORM_LOG_S, **fields)
        self._logged_at = now
        self._count = 0


def raise_file_limit() -> int:
    """Raise the soft limit of open files to the hard one; return the limit now in force.

    Many systems start services with a soft limit of 1,024 and a far higher
    hard one; the daemon takes what it is allowed, so the share its page may
    hold (and the reserve left to its rounds) grows with it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft
        return wanted
    return soft


def quiet_accept_storms(loop: asyncio.AbstractEventLoop) -> None:
    """Report failed accepts on `loop` once a minute, with their count, instead of each one."""
    storm = StormLog("daemon.accept_failed")
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == ACCEPT_FAILED:
            error = context.get("exception")
            errno = getattr(error, "errno", None)
            storm.note(loop.time(), error=os.strerror(errno) if errno else type(error).__name__)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
