"""A listener's connections, bounded: how many, how long idle, and a reserve of descriptors.

Every open connection holds a file descriptor, and the daemon's rounds need
descriptors too (the database, the model endpoint, a webhook, the poke
socket). Unbounded, a thousand idle connections once took all 1,024 of them:
pokes went unanswered and the event loop logged each failed accept, hundreds
of thousands of lines. So the page and the API keep at most a share of the
descriptors (`listener_bounds`); a connection that has no request under way
for `IDLE_S` is closed, however slowly it trickles bytes; a request whose
headers and body are not all in within `REQUEST_S` of its first byte is
answered 408 and closed, so a body sent a byte a second holds no slot for
long. Nor does it keep anyone out meanwhile: a connection past the cap takes
the place of the one whose request has been arriving longest (answered 408),
and only when no request is arriving is it answered 503 and closed at once.
Refusals are logged once a minute with their count, never one line per
connection.
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
REQUEST_S: Final = 10.0  # seconds from a request's first byte until its body must be all in
BACKLOG: Final = 128  # connections queued by the kernel, and accepted in one go, at most
_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n"
)
_TOO_SLOW_BODY: Final = b'{"error": "the request did not arrive in time"}\n'
_TOO_SLOW: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_SLOW_BODY), _TOO_SLOW_BODY)
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


def bounded_protocol(
    *, cap: int, idle_s: float, storm: StormLog, request_s: float = REQUEST_S
) -> type[H11Protocol]:
    """uvicorn's h11 protocol, with the connection cap and the timeouts of one server.

    Args:
        cap: connections held at most; one more is answered 503 and closed.
        idle_s: seconds a connection may wait with no request under way.
        storm: where refusals are counted and logged once a minute.
        request_s: seconds from a request's first byte until its headers and
            body are all in; past it the request is answered 408 and closed.
    """

    class Bounded(H11Protocol):
        _idle: asyncio.TimerHandle | None = None
        _idle_since = 0.0
        _request_began: float | None = None
        """When the first byte of the request now arriving came in (None: none is arriving)."""

        _answered = False
        """The request now arriving was answered already (before its body was all in)."""

        def data_received(self, data: bytes) -> None:
            if data and self._request_began is None and not self._serving():
                self._request_began = self.loop.time()
                self._answered = False
            super().data_received(data)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= cap and not self._make_room():
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
            cycle = self.cycle
            if cycle is not None and cycle.more_body:
                # Answered before its body was all in (a refusal): the rest of the body
                # must still arrive in time, and is never answered a second time.
                self._answered = True
            else:
                self._request_began = None
            super().on_response_complete()

        def _serving(self) -> bool:
            """A request is all in and the app is answering it: its time, not the client's."""
            cycle = self.cycle
            return cycle is not None and not cycle.more_body and not cycle.response_complete

        def _arriving(self) -> bool:
            """Bytes of a request came in and its headers or body are not all in yet."""
            return self._request_began is not None and not self._serving()

        def _make_room(self) -> bool:
            """Close the connection whose request has been arriving longest; False if none is.

            A request still arriving is answered by nobody yet: its place goes
            to the newcomer, so slow bodies, however many, never keep a whole
            request out.
            """
            arriving = [
                c
                for c in self.connections
                if isinstance(c, Bounded) and not c.transport.is_closing() and c._arriving()
            ]
            if not arriving:
                return False
            oldest = min(arriving, key=lambda c: c._request_began or 0.0)
            # Out of the count now: its close completes on a later turn of the loop.
            self.connections.discard(oldest)
            oldest._too_slow()
            return True

        def _too_slow(self) -> None:
            """Answer the request arriving 408 (unless it was answered already) and close."""
            cycle = self.cycle
            unanswered = cycle is None or cycle.response_complete or not cycle.response_started
            if unanswered and not self._answered:
                with contextlib.suppress(Exception):
                    self.transport.write(_TOO_SLOW)
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            super().connection_lost(exc)

        def _check_idle(self) -> None:
            self._idle = None
            if self.transport.is_closing():
                return
            if self._arriving():
                assert self._request_began is not None
                late = self.loop.time() - self._request_began
                if late >= request_s:
                    # However slowly it trickles, a request holds its slot for request_s.
                    self._too_slow()
                    return
                self._idle = self.loop.call_later(request_s - late, self._check_idle)
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
