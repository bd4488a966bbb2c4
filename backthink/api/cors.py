"""Browser front-ends of the origins `api.cors_origins` names may call the API and the relay.

A chat front-end that runs in the browser (Open WebUI's Direct Connections,
a web chat app) calls `/v1/` from its own origin; the browser lets it read
the answer only when the answer names that origin, and asks first
(`OPTIONS` with `Access-Control-Request-Method`, the preflight) before a
request with a bearer token or a JSON body. For a listed origin the
preflight is answered 204 and every answer names the origin; for any other
origin nothing changes (a preflight gets an OpenAI-style 403, so the
browser refuses the call). The page's own paths are never touched. Being
allowed to call is not being let in: the bearer token still decides, and a
loopback API open without tokens still answers no other site's page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backthink.api.refusals import error_body

PREFIX = "/v1/"
METHODS = "GET, POST, OPTIONS"
MAX_AGE_S = 600  # seconds a browser may reuse a preflight's answer
EXPOSED = "retry-after, x-request-id"
HEADER_CHARS = 2000  # characters of a preflight's requested header list echoed, at most


class Cors:
    """ASGI middleware answering preflights and naming allowed origins on `/v1/` answers."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        """Let the browser pages of `origins` (e.g. `http://localhost:3000`) read `/v1/`."""
        self._app = app
        self._origins = frozenset(o.rstrip("/") for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; answer a preflight; name an allowed origin on the answer."""
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(PREFIX):
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        allowed = origin is not None and origin in self._origins
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(send, origin if allowed else None, headers)
            return
        if not allowed:
            await self._app(scope, receive, send)
            return
        assert origin is not None

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers", []))
                raw += [
                    (b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"access-control-expose-headers", EXPOSED.encode()),
                    (b"vary", b"Origin"),
                ]
                message = {**message, "headers": raw}
            await send(message)

        await self._app(scope, receive, named)


async def _preflight(send: Send, origin: str | None, headers: Headers) -> None:
    """Answer a preflight: 204 naming the origin, or 403 when it is not listed."""
    if origin is None:
        body = json.dumps(
            error_body(403, "this origin is not in api.cors_origins", "openai")
        ).encode()
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 403, "headers": raw})
        await send({"type": "http.response.body", "body": body})
        return
    asked = headers.get("access-control-request-headers", "")[:HEADER_CHARS]
    # Only header-name characters are echoed back.
    asked = "".join(c for c in asked if c.isascii() and (c.isalnum() or c in "-_, "))
    raw = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", METHODS.encode()),
        (b"access-control-allow-headers", asked.encode()),
        (b"access-control-max-age", str(MAX_AGE_S).encode()),
        (b"vary", b"Origin"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": raw})
    await send({"type": "http.response.body", "body": b""})
