"""`GET /v1/events`: the owner's pushes as Server-Sent Events, resumable, kept alive.

Every push the companion adds to the session, on any channel, is one
`event: push` whose id is the message's id and whose data is the message
object of `GET /v1/messages`. The stream reads the pushes from the session
itself, after the last one it sent: a push of this process wakes it at once,
one written by another process is found at the next keep-alive at the
latest. A client that reconnects with `Last-Event-ID` gets every push after
that one; without it, the stream begins at the session's end.

While a stream is open, its owner counts as present (the session channel is
connected, see `backthink.delivery.audience`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import structlog
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from backthink.api.access import Access
from backthink.delivery.audience import Audience
from backthink.host.fleet import Fleet
from backthink.models import SessionEntry

log = structlog.get_logger("backthink.api")

KEEPALIVE_S = 15.0  # seconds between comment lines on a quiet stream (and re-reads)
BATCH = 100  # pushes read from the session at a time
HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def push_event(entry: SessionEntry) -> bytes:
    """One push as an SSE event: its id, `event: push`, the message object as one line of data."""
    data = json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {entry.message.id}\nevent: push\ndata: {data}\n\n".encode()


class EventRoutes:
    """Serves every owner's event stream; `close` ends them all (the daemon is stopping)."""

    def __init__(
        self, fleet: Fleet, access: Access, audience: Audience, *, keepalive_s: float = KEEPALIVE_S
    ) -> None:
        """Read pushes from the fleet's session store; hold streams open in `audience`."""
        self._access = access
        self._session = fleet.stores.session
        self._audience = audience
        self._keepalive_s = keepalive_s
        self._closing = asyncio.Event()
        self._open: set[asyncio.Event] = set()

    def close(self) -> None:
        """End every open stream (its client reconnects to the next daemon)."""
        self._closing.set()
        for wake in self._open:
            wake.set()

    async def events(self, request: Request) -> Response:
        """GET /v1/events: the stream of the owner's pushes."""
        owner_id = await self._access.owner(request)
        cursor = await self._start(owner_id, request.headers.get("last-event-id", ""))
        return StreamingResponse(
            self._stream(owner_id, cursor), media_type="text/event-stream", headers=HEADERS
        )

    async def _start(self, owner_id: str, last: str) -> int | None:
        """Where the stream begins: after `Last-Event-ID` if it is the owner's, else at the end."""
        last = last.strip()
        if last.isdigit() and len(last) <= 18:
            known = await self._session.pushes(owner_id, after=int(last), limit=0)
            if known is not None:
                return int(last)
        return await self._session.last_id(owner_id)

    async def _stream(self, owner_id: str, cursor: int | None) -> AsyncIterator[bytes]:
        with self._audience.listening(owner_id) as wake:
            self._open.add(wake)
            log.debug("api.stream_opened", owner_id=owner_id)
            try:
                yield b": connected\n\n"
                while not self._closing.is_set():
                    # Cleared before reading: a push announced during the read wakes the next wait.
                    wake.clear()
                    found = await self._session.pushes(owner_id, after=cursor, limit=BATCH)
                    if found is None:
                        # The message the stream stood on is gone (forgotten): go on from the end.
                        cursor = await self._session.last_id(owner_id)
                        continue
                    for entry in found:
                        yield push_event(entry)
                        cursor = entry.message.id
                    if len(found) == BATCH:
                        continue
                    try:
                        await asyncio.wait_for(wake.wait(), self._keepalive_s)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
            finally:
                self._open.discard(wake)
                log.debug("api.stream_closed", owner_id=owner_id)
