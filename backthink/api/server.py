"""The API's routes (Starlette) and its listener, shared with the page when the addresses match."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from backthink.api.access import Access
from backthink.api.bodies import Refusal, Style, error_response
from backthink.api.events import KEEPALIVE_S, EventRoutes
from backthink.api.openapi import document
from backthink.api.relay import Relay
from backthink.api.session import SessionRoutes
from backthink.delivery.audience import Audience
from backthink.errors import StoreError
from backthink.host.fleet import Fleet
from backthink.host.limits import API_CONNECTIONS
from backthink.host.live import Live
from backthink.host.serving import HttpServer, serve
from backthink.redact import redact_url

log = structlog.get_logger("backthink.api")

Handler = Callable[[Request], Awaitable[Response]]
PageApp = Callable[[Fleet, list[str], Live], Awaitable[ASGIApp]]
"""Builds the page, to be served on the API's listener."""

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _guarded(handler: Handler, style: Style) -> Handler:
    async def run(request: Request) -> Response:
        try:
            response = await handler(request)
        except Refusal as refusal:
            response = refusal.response(style)
        except StoreError as exc:
            log.warning("api.store_error", path=request.url.path, error=str(exc))
            response = error_response(503, f"database unavailable: {exc}", style)
        response.headers.setdefault("cache-control", "no-store")
        return response

    return run


async def _openapi(request: Request) -> Response:
    return JSONResponse(document())


async def _unknown(request: Request) -> Response:
    return error_response(404, f"no endpoint {request.method} {request.url.path}", "api")


class Api:
    """Every route of the API and the relay, over the fleet's owners."""

    def __init__(
        self, fleet: Fleet, owners: list[str], live: Live, *, keepalive_s: float = KEEPALIVE_S
    ) -> None:
        """Serve the fleet's owners; an open loopback API speaks for `owners[0]`."""
        settings = fleet.settings
        # Without the daemon's own audience (a test's fleet), streams still work; the
        # session channel of the fleet's apps then just does not follow them.
        audience = fleet.audience or Audience(settings.api.seen_window)
        access = Access(fleet, settings.api, owners[0])
        self.session = SessionRoutes(
            fleet, access, live=live, max_body_bytes=settings.api.max_body_bytes
        )
        self.events = EventRoutes(fleet, access, audience, keepalive_s=keepalive_s)
        self.relay = Relay(fleet, access, settings=settings)
        self.session.relay_usage = lambda owner_id: self.relay.usage(owner_id).to_json()

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
        ]
        return [
            *(Route(path, _guarded(h, "api"), methods=[m]) for path, h, m in api),
            *(Route(path, _guarded(h, "openai"), methods=[m]) for path, h, m in relay),
            Route("/v1/{rest:path}", _unknown, methods=METHODS),
        ]

    async def close(self) -> None:
        """End the event streams and finish the relay's session writes."""
        self.events.close()
        await self.relay.close()


class ApiDoors:
    """The API's listener (perhaps carrying the page too), running in the daemon's loop."""

    def __init__(self, api: Api, server: HttpServer) -> None:
        """Wrap a started server; use `open_api`."""
        self.api = api
        self.server = server
        self.url = server.url

    async def stop(self) -> None:
        """End the streams, stop serving, and finish the relay's writes."""
        self.api.events.close()
        await self.server.stop()
        await self.api.close()


async def open_api(
    fleet: Fleet,
    owners: list[str],
    live: Live,
    *,
    page: PageApp | None = None,
    keepalive_s: float = KEEPALIVE_S,
) -> ApiDoors:
    """Listen on `api.listen` and serve the API (and, with `page`, the page beside it).

    Raises:
        BackthinkError: the address cannot be listened on.
    """
    settings = fleet.settings.api
    address = settings.address
    assert address is not None, "open_api needs api.listen"
    api = Api(fleet, owners, live, keepalive_s=keepalive_s)
    routes = api.routes()
    ready = ["api.ready"]
    if page is not None:
        routes.append(Mount("", app=await page(fleet, owners, live)))
        ready.append("web.ready")
    try:
        server = await serve(
            Starlette(routes=routes),
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
