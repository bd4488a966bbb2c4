"""An HTTP upstream on 127.0.0.1 that answers slowly on purpose: its headers, then a byte at a time.

It runs in the test's own event loop. Every request is answered 200 with
`total` bytes announced, sent one every `every_s` seconds; `closed` is set
once the client hangs up on it, so a test sees that the connection was not
left open. `/models` is answered the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

HEAD_MAX_BYTES = 64 * 1024  # a request head longer than this is no test's


class Dribbler:
    """Answers every request with its headers at once and its body a byte every `every_s`."""

    def __init__(self, *, every_s: float = 1.0, total: int = 60) -> None:
        """Announce `total` bytes of body and send one every `every_s` seconds."""
        self._every_s = every_s
        self._total = total
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.closed = asyncio.Event()
        self.port = 0

    @property
    def base_url(self) -> str:
        """The base URL a relay forwards to, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Dribbler:
        """Start listening on a free port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Stop listening and end every answer under way."""
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        hung_up: asyncio.Future[bytes] | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > HEAD_MAX_BYTES:
                return
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            await reader.readexactly(length)
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % self._total
            )
            hung_up = asyncio.ensure_future(reader.read(1))
            for _ in range(self._total):
                writer.write(b" ")
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(hung_up), self._every_s)
                if hung_up.done():
                    self.closed.set()
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed.set()
        finally:
            if hung_up is not None:
                hung_up.cancel()
            self._tasks.discard(task)
            writer.close()
