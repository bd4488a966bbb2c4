"""The page's server: uvicorn inside the daemon's own event loop, its connections bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator

import structlog
import uvicorn

from backthink.errors import BackthinkError
from backthink.host.app import App
from backthink.host.descriptors import StormLog
from backthink.host.fleet import Fleet
from backthink.host.live import Live
from backthink.web.limits import IDLE_S, MAX_CONNECTIONS, bounded_protocol, page_bounds
from backthink.web.server import build_asgi

log = structlog.get_logger("backthink.web")

START_TIMEOUT_S = 10.0  # seconds for the server to begin accepting connections
STOP_TIMEOUT_S = 5.0  # seconds for the server to finish on shutdown
GRACEFUL_S = 2  # seconds open connections get to finish once the daemon stops


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The daemon owns SIGTERM and SIGINT; it stops this server itself when it drains.
        yield


class WebServer:
    """The page's server, running as a task of the daemon's event loop."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], url: str) -> None:
        """Wrap a started server; use `start_web`."""
        self._server = server
        self._task = task
        self.url = url

    async def stop(self) -> None:
        """Stop accepting, let open requests finish briefly, and end the task."""
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("web.stop_timeout")
        except Exception:
            log.exception("web.failed")


async def start_web(
    app: App,
    owner_id: str,
    *,
    live: Live | None = None,
    max_connections: int = MAX_CONNECTIONS,
    idle_s: float = IDLE_S,
) -> WebServer:
    """Listen on `web.listen` and serve the page until `stop`.

    At most `max_connections` connections are held (fewer when the process
    has few descriptors: see `backthink.web.limits`), each closed once it has
    had no request under way for `idle_s` seconds.

    Raises:
        BackthinkError: the address cannot be listened on (in use, not this machine's).
    """
    web = app.settings.web
    address = web.address
    assert address is not None, "start_web needs web.listen"
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise BackthinkError(f"web.listen {web.listen!r}: cannot listen: {why}") from None
    bounds = page_bounds(max_connections)
    cap = bounds.connections
    config = uvicorn.Config(
        build_asgi(app, owner_id, live=live),
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_S,
        http=bounded_protocol(cap=cap, idle_s=idle_s, storm=StormLog("web.connections_refused")),
        # The protocol refuses connections past the cap; uvicorn's own bound counts the
        # connection asking too, and bounds the requests running at once.
        limit_concurrency=cap + 1,
        backlog=bounds.backlog,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()
                    raise BackthinkError(f"web.listen {web.listen!r}: the server did not start")
                await asyncio.sleep(0.01)
    except BaseException:
        task.cancel()
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    log.info("web.ready", url=url, token=web.secret is not None, max_connections=cap)
    return WebServer(server, task, url)


async def open_page(fleet: Fleet, owners: list[str], live: Live) -> WebServer:
    """The daemon's doors when `[web] listen` is set: the page of its first owner."""
    return await start_web(await fleet.app(owners[0]), owners[0], live=live)
