"""`GET /v1/events`: the owner's pushes as Server-Sent Events, resumable, kept alive, bounded.

Every push the companion adds to the session, on any channel, is one
`event: push` whose id is the message's id and whose data is the message
object of `GET /v1/messages`. The stream reads the pushes from the session
itself, by id, after the last one it sent: a push of this process wakes it
at once, one written by another process is found at the next keep-alive at
the latest. A client that reconnects with `Last-Event-ID` gets every push
after that one; without it, the stream begins after the newest push.

A comment line goes out after `KEEPALIVE_S` without any write, so the
contract's 15 s hold even on a loaded machine. An owner holds at most
`MAX_STREAMS` streams open at once (429 beyond), so idle streams of one
owner cannot take every connection the listener serves. A database that
fails under an open stream ends it, logged; the client reconnects with its
`Last-Event-ID`.

While a stream is open, its owner counts as present (the session channel is
connected, see `backthink.delivery.audience`). Its right is checked again
each time it wakes, at least every `KEEPALIVE_S`: a stream whose token was
revoked meanwhile (or of an open loopback API that a first token closed) ends
then, sends nothing more, and its owner no longer counts as present.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from starlette.requests import Request
from starlette.responses import Response

from backthink.api.access import Access
from backthink.api.bodies import number_param
from backthink.api.refusals import Refusal
from backthink.api.responses import EndingStream
from backthink.delivery.audience import Audience
from backthink.errors import StoreError
from backthink.host.fleet import Fleet
from backthink.models import SessionEntry

log = structlog.get_logger(__name__)

KEEPALIVE_S = 10.0  # seconds without a write before a comment line (the contract allows 15)
MAX_STREAMS = 8  # event streams one owner may hold open at once
BATCH = 100  # pushes read from the session at a time
HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def push_event(entry: SessionEntry) -> bytes:
    """One push as an SSE event: its id, `event: push`, the message object as one line of data."""
    data = json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {entry.message.id}\nevent: push\ndata: {data}\n\n".encode()


class EventRoutes:
    """Serves every owner's event stream; `close` ends them all (the daemon is stopping)."""

    def __init__(
        self,
        fleet: Fleet,
        access: Access,
        audience: Audience,
        *,
        keepalive_s: float = KEEPALIVE_S,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        """Read pushes from the fleet's sessions; hold streams open in `audience`."""
        self._access = access
        self._session = fleet.session
        self._audience = audience
        self._keepalive_s = keepalive_s
        self._max_streams = max_streams
        self._closing = asyncio.Event()
        self._open: set[asyncio.Event] = set()
        self._held: dict[str, int] = {}

    def close(self) -> None:
        """End every open stream (its client reconnects to the next daemon)."""
        self._closing.set()
        for wake in self._open:
            wake.set()

    async def events(self, request: Request) -> Response:
        """GET /v1/events: the stream of the owner's pushes.

        Raises:
            Refusal: 400 for a `Last-Event-ID` that is no id, 429 past the
                owner's open streams.
        """
        owner_id = await self._access.owner(request)
        cursor = await self._start(owner_id, request.headers.get("last-event-id"))
        held = self._held.get(owner_id, 0)
        if held >= self._max_streams:
            raise Refusal(
                429, f"{held} event streams of this owner are open already: close one first"
            )
        self._held[owner_id] = held + 1

        async def release() -> None:
            self._release(owner_id)

        async def allowed() -> bool:
            return await self._access.holds(request, owner_id)

        return EndingStream(
            self._stream(owner_id, cursor, allowed),
            on_end=release,
            headers=HEADERS,
            media_type="text/event-stream",
        )

    def held(self, owner_id: str) -> int:
        """How many event streams of the owner are open (or opening)."""
        return self._held.get(owner_id, 0)

    def _release(self, owner_id: str) -> None:
        """One stream of the owner ended (or never began)."""
        left = self._held.get(owner_id, 0) - 1
        if left > 0:
            self._held[owner_id] = left
        else:
            self._held.pop(owner_id, None)

    async def _start(self, owner_id: str, last: str | None) -> int:
        """Where the stream reads on from: `Last-Event-ID` if the owner's, else the newest push.

        Raises:
            Refusal: 400 for a `Last-Event-ID` that is no whole number.
        """
        given = number_param((last or "").strip(), "last-event-id", default=None, low=0)
        if given is not None and await self._session.holds(owner_id, given):
            return given
        return await self._session.last_push_id(owner_id) or 0

    async def _stream(
        self, owner_id: str, cursor: int, allowed: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[bytes]:
        """The stream's lines: pushes after `cursor` as they come, keep-alives between.

        It ends once `allowed` says its request no longer speaks for the owner.
        """
        clock = asyncio.get_running_loop().time
        with self._audience.listening(owner_id) as wake:
            self._open.add(wake)
            log.info("api.stream_opened", owner_id=owner_id)
            try:
                yield b": connected\n\n"
                wrote = clock()
                while not self._closing.is_set():
                    # Cleared before reading: a push announced during the read wakes the next wait.
                    wake.clear()
                    try:
                        if not await allowed():
                            log.info("api.stream_revoked", owner_id=owner_id)
                            return
                        found = await self._session.pushes(owner_id, after=cursor, limit=BATCH)
                    except StoreError as exc:
                        log.warning("api.stream_failed", owner_id=owner_id, error=str(exc))
                        return
                    if found:
                        yield b"".join(push_event(entry) for entry in found)
                        cursor = found[-1].message.id or cursor
                        wrote = clock()
                        if len(found) == BATCH:
                            continue
                    if clock() - wrote >= self._keepalive_s:
                        yield b": keep-alive\n\n"
                        wrote = clock()
                    try:
                        # Woken by a push, by the close, or at the keep-alive; then read again.
                        await asyncio.wait_for(wake.wait(), wrote + self._keepalive_s - clock())
                    except TimeoutError:
                        pass
            finally:
                self._open.discard(wake)
                log.info("api.stream_closed", owner_id=owner_id)
