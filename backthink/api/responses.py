"""A streamed response that always runs its ending, even when its body was never started.

Starlette starts a streaming body only once the response's head is sent; a
client gone before that leaves the body's own `finally` unrun. What a stream
holds (an owner's place among the open streams, an upstream connection, a
relayed call not yet counted) is given back here instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EndingStream(StreamingResponse):
    """A StreamingResponse that awaits `on_end` once it is over, however it ended."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        *,
        on_end: Callable[[], Awaitable[None]],
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        """Stream `body`; `on_end` runs after it, also when it never began."""
        super().__init__(body, headers=headers, media_type=media_type)
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the response, then run the ending."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_end()
