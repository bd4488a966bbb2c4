"""The systemd notify protocol (READY, WATCHDOG, STOPPING) with the standard library only."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


class Notifier:
    """Sends state lines to $NOTIFY_SOCKET; does nothing when not run by systemd."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        # A leading "@" names a socket in the abstract namespace.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._watchdog_s = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        """True when systemd (or a test standing in for it) listens."""
        return bool(self._address)

    @property
    def watchdog_interval_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None when off."""
        return self._watchdog_s

    def notify(self, *lines: str) -> None:
        """Send one datagram of `KEY=VALUE` lines; failures are ignored, as sd_notify does."""
        if not self._address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                # Never block the event loop: a datagram socket whose reader lags
                # blocks the sender once its queue is full.
                sock.setblocking(False)
                sock.connect(self._address)
                sock.sendall("\n".join(lines).encode())
        except OSError:
            # systemd went away (or never was); the daemon keeps working without it.
            pass


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0:
        return None
    if pid and pid != str(os.getpid()):
        return None  # the watchdog is meant for another process
    return int(usec) / 1_000_000 / 2
