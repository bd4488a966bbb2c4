"""The API's routes (Starlette) and its listener, shared with the page when the addresses match.

Every `/v1/` path answers JSON: the API's own routes in its style, the
relay's (and any path under `/v1/` that is no route) as an OpenAI-compatible
server does, so a chat front-end shows its own error text. Browser pages of
`api.cors_origins` may call them (`backthink.api.cors`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from backthink.api.access import Access
from backthink.api.cors import Cors
from backthink.api.events import KEEPALIVE_S, EventRoutes
from backthink.api.openapi import document
from backthink.api.refusals import Refusal, Style, error_response
from backthink.api.relay import ANSWER_MAX_BYTES, Relay
from backthink.api.session import SessionRoutes
from backthink.delivery.audience import Audience
from backthink.errors import ConfigError, InputError, StoreError
from backthink.host.fleet import Fleet
from backthink.host.limits import API_CONNECTIONS
from backthink.host.live import Live
from backthink.host.serving import HttpServer, serve
from backthink.redact import redact_url

log = structlog.get_logger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
PageApp = Callable[[Fleet, list[str], Live], Awaitable[ASGIApp]]
"""Builds the page, to be served on the API's listener."""

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def _guarded(handler: Handler, style: Style) -> Handler:
    """The handler with every expected failure answered as an error of `style`.

    A refusal is the request's fault; an owner disabled or gone while the
    request ran is as if its token opened nothing (401); settings that cannot
    work and a database that fails are the daemon's (503), logged.
    """

    async def run(request: Request) -> Response:
        """The answer, or the error the failure calls for."""
        try:
            response = await handler(request)
        except Refusal as refusal:
            response = refusal.response(style)
        except InputError as exc:
            response = error_response(401, f"the token's owner cannot be served: {exc}", style)
        except ConfigError as exc:
            log.warning("api.config_error", path=request.url.path, error=str(exc))
            response = error_response(503, f"not configured: {exc}", style)
        except StoreError as exc:
            log.warning("api.store_error", path=request.url.path, error=str(exc))
            response = error_response(503, f"database unavailable: {exc}", style)
        response.headers.setdefault("cache-control", "no-store")
        return response

    return run


async def _openapi(request: Request) -> Response:
    """GET /v1/openapi.json."""
    return JSONResponse(document())


async def _unknown(request: Request) -> Response:
    """Any other path under /v1/: a 404 as an OpenAI-compatible server answers it."""
    return error_response(404, f"no endpoint {request.method} {request.url.path}", "openai")


class Api:
    """Every route of the API and the relay, over the fleet's owners."""

    def __init__(
        self,
        fleet: Fleet,
        owners: list[str],
        live: Live,
        *,
        keepalive_s: float = KEEPALIVE_S,
        max_answer_bytes: int = ANSWER_MAX_BYTES,
    ) -> None:
        """Serve the fleet's owners; an open loopback API speaks for `owners[0]`.

        `keepalive_s` and `max_answer_bytes` are the event streams' and the
        relay's bounds (tests make them small).
        """
        settings = fleet.settings
        # Without the daemon's own audience (a test's fleet), streams still work; the
        # session channel of the fleet's apps then just does not follow them.
        audience = fleet.audience or Audience(settings.api.seen_window)
        access = Access(fleet, settings.api, owners[0])
        self.relay = Relay(fleet, access, settings=settings, max_answer_bytes=max_answer_bytes)
        self.session = SessionRoutes(
            fleet,
            access,
            live=live,
            max_body_bytes=settings.api.max_body_bytes,
            relay_usage=lambda owner_id: self.relay.usage(owner_id).to_json(),
        )
        self.events = EventRoutes(fleet, access, audience, keepalive_s=keepalive_s)

    def routes(self) -> list[BaseRoute]:
        """The API's routes, all under `/v1/`."""
        api: list[tuple[str, Handler, str]] = [
            ("/v1/messages", self.session.post_messages, "POST"),
            ("/v1/messages", self.session.get_messages, "GET"),
            ("/v1/events", self.events.events, "GET"),
            ("/v1/status", self.session.status, "GET"),
            ("/v1/openapi.json", _openapi, "GET"),
        ]
        relay: list[tuple[str, Handler, str]] = [
            ("/v1/chat/completions", self.relay.chat, "POST"),
            ("/v1/models", self.relay.models, "GET"),
            ("/v1/embeddings", self.relay.embeddings, "POST"),
            # The task base URL: a front-end's second connection for its own tasks.
            ("/v1/tasks/chat/completions", self.relay.task_chat, "POST"),
            ("/v1/tasks/models", self.relay.models, "GET"),
        ]
        return [
            *(Route(path, _guarded(h, "api"), methods=[m]) for path, h, m in api),
            *(Route(path, _guarded(h, "openai"), methods=[m]) for path, h, m in relay),
            Route("/v1/{rest:path}", _unknown, methods=METHODS),
        ]

    def end_streams(self) -> None:
        """End every event stream and relayed stream (the daemon is stopping)."""
        self.events.close()
        self.relay.end_streams()

    async def close(self) -> None:
        """End the streams, finish the relay's session writes, close its connections."""
        self.end_streams()
        await self.relay.close()


class ApiDoors:
    """The API's listener (perhaps carrying the page too), running in the daemon's loop."""

    def __init__(self, api: Api, server: HttpServer) -> None:
        """Wrap a started server; use `open_api`."""
        self.api = api
        self.server = server
        self.url = server.url

    async def stop(self) -> None:
        """End the streams first (so the server has none left to cut), stop serving, close."""
        self.api.end_streams()
        await self.server.stop()
        await self.api.close()


async def open_api(
    fleet: Fleet,
    owners: list[str],
    live: Live,
    *,
    page: PageApp | None = None,
    keepalive_s: float = KEEPALIVE_S,
    max_answer_bytes: int = ANSWER_MAX_BYTES,
) -> ApiDoors:
    """Listen on `api.listen` and serve the API (and, with `page`, the page beside it).

    Raises:
        BackthinkError: the address cannot be listened on.
    """
    settings = fleet.settings.api
    address = settings.address
    assert address is not None, "open_api needs api.listen"
    api = Api(fleet, owners, live, keepalive_s=keepalive_s, max_answer_bytes=max_answer_bytes)
    routes = api.routes()
    ready = ["api.ready"]
    if page is not None:
        routes.append(Mount("", app=await page(fleet, owners, live)))
        ready.append("web.ready")
    try:
        app: ASGIApp = Starlette(routes=routes)
        if settings.cors_origins:
            app = Cors(app, settings.cors_origins)
        server = await serve(
            app,
            address,
            key="api.listen",
            listen=settings.listen,
            ready=ready,
            fields={"relay": redact_url(fleet.settings.relay.upstream) or "model.base_url"},
            max_connections=API_CONNECTIONS,
        )
    except BaseException:
        await api.close()
        raise
    return ApiDoors(api, server)
