"""A listener's connections, bounded: how many, how long idle, and a reserve of descriptors.

Every open connection holds a file descriptor, and the daemon's rounds need
descriptors too (the database, the model endpoint, a webhook, the poke
socket). Unbounded, a thousand idle connections once took all 1,024 of them:
pokes went unanswered and the event loop logged each failed accept, hundreds
of thousands of lines. So the page and the API keep at most a share of the
descriptors (`listener_bounds`); a connection past the cap is answered 503 and closed at
once; a connection that has no request under way for `IDLE_S` is closed,
however slowly it trickles bytes; and refusals are logged once a minute with
their count, never one line per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from dataclasses import dataclass
from typing import Final

from uvicorn.protocols.http.h11_impl import H11Protocol

from backthink.host.descriptors import StormLog

PAGE_CONNECTIONS: Final = 64  # connections the page alone holds open at most
# The API holds its clients' event streams open as well: more connections, still bounded.
API_CONNECTIONS: Final = 256
DESCRIPTOR_SHARE: Final = 4  # a listener holds at most a quarter of the process's descriptors
IDLE_S: Final = 10.0  # seconds a connection may stay open with no request under way
BACKLOG: Final = 128  # connections queued by the kernel, and accepted in one go, at most
_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n"
)


@dataclass(frozen=True)
class Bounds:
    """How many connections a listener holds, and how many it accepts in one go."""

    connections: int
    backlog: int
    """Also how many connections the event loop accepts at once: each holds a descriptor
    until the loop closes it, a refused one included."""


def listener_bounds(maximum: int = PAGE_CONNECTIONS) -> Bounds:
    """A listener's bounds within its share of the process's descriptors.

    Half the share is for connections held (at most `maximum`), the rest for
    those accepted in one go before the refused ones are closed.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return Bounds(maximum, BACKLOG)
    share = max(2, soft // DESCRIPTOR_SHARE)
    held = max(1, min(maximum, share // 2))
    return Bounds(held, max(1, min(BACKLOG, share - held)))


def bounded_protocol(*, cap: int, idle_s: float, storm: StormLog) -> type[H11Protocol]:
    """uvicorn's h11 protocol, with the connection cap and the idle timeout of one server."""

    class Bounded(H11Protocol):
        _idle: asyncio.TimerHandle | None = None
        _idle_since = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= cap:
                # Answered and closed at once: the descriptor is free again right away.
                self.transport = transport
                with contextlib.suppress(Exception):
                    transport.write(_REFUSAL)
                transport.close()
                storm.note(self.loop.time(), cap=cap)
                return
            super().connection_made(transport)
            self._idle_since = self.loop.time()
            self._idle = self.loop.call_later(idle_s, self._check_idle)

        def on_response_complete(self) -> None:
            self._idle_since = self.loop.time()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            super().connection_lost(exc)

        def _check_idle(self) -> None:
            self._idle = None
            if self.transport.is_closing():
                return
            busy = self.cycle is not None and not self.cycle.response_complete
            waited = self.loop.time() - self._idle_since
            if busy or waited < idle_s:
                self._idle = self.loop.call_later(
                    idle_s if busy else idle_s - waited, self._check_idle
                )
                return
            # No request under way for idle_s: whatever trickles in, the slot is taken back.
            self.transport.close()

    return Bounded
