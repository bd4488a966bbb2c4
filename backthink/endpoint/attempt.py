"""Each request to the model endpoint ends within `model.timeout_s`, its answer's body included.

The HTTP library's timeouts bound each read, not a request: an endpoint that
sends its headers and then one byte a second never trips a 3 s read timeout,
and held rounds for minutes. Here the whole attempt (connect, send, the
status, every byte of the body) runs under one deadline; an attempt past it
fails as a timeout, which the SDK retries like any other, each retry with a
deadline of its own. The call as a whole, retries and the pauses between
them included, is bounded by `call_budget` (the client applies it).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import httpx2
import openai

FIRST_PAUSE_S: Final = 0.5
"""Seconds of the SDK's first pause before a retry; each next one doubles."""
LONGEST_PAUSE_S: Final = 8.0
"""Seconds of the SDK's longest pause between two attempts."""
ATTEMPT_GRACE_S: Final = 0.25
"""Seconds per attempt beyond `timeout_s` in the call's budget, for the SDK's own work, so
an attempt's own deadline ends it first and the error says so."""


def call_budget(timeout_s: float, max_retries: int) -> float:
    """Seconds a whole call may take: `timeout_s` per attempt and the SDK's pauses between them.

    A server's Retry-After may ask for longer pauses; the budget then ends the
    call: a round waits for its endpoint no longer than this, whatever it says.
    """
    pauses = sum(min(FIRST_PAUSE_S * 2.0**n, LONGEST_PAUSE_S) for n in range(max_retries))
    return (timeout_s + ATTEMPT_GRACE_S) * (max_retries + 1) + pauses


class WholeAttemptClient(openai.DefaultAsyncHttpxClient):
    """The SDK's HTTP client, each request bounded as a whole by `attempt_s` seconds."""

    def __init__(self, *, attempt_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._attempt_s = attempt_s

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        """Send one request and read its whole answer within `attempt_s`.

        Raises:
            httpx2.ReadTimeout: the answer was not complete in time.
        """
        try:
            async with asyncio.timeout(self._attempt_s):
                response = await super().send(request, **kwargs)
                if kwargs.get("stream"):
                    # The client never streams a reply: read it here, under the deadline.
                    await response.aread()
                return response
        except TimeoutError:
            raise httpx2.ReadTimeout(
                f"no complete answer within {self._attempt_s:g} s", request=request
            ) from None
