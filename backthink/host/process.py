"""What every long-running backthink process shares: stop signals and the systemd watchdog."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from backthink.host.notify import Notifier

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_stop_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call `stop` on SIGTERM or SIGINT while the block runs (in the running event loop)."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def watchdog(notifier: Notifier, interval_s: float) -> None:
    """Ping systemd's watchdog every `interval_s` until cancelled.

    Pinged from the event loop itself: a blocked loop stops the pings and
    systemd restarts the service.
    """
    while True:
        notifier.notify("WATCHDOG=1")
        await asyncio.sleep(interval_s)


def start_watchdog(notifier: Notifier) -> asyncio.Task[None] | None:
    """The watchdog task when systemd asked for one (WatchdogSec=), else None."""
    interval = notifier.watchdog_interval_s
    return asyncio.create_task(watchdog(notifier, interval)) if interval is not None else None
