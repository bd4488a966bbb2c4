"""An HTTP listener inside the daemon's own event loop: uvicorn serving one ASGI application.

The page and the API both open their doors through `serve`; one listener may
carry both. Imported only by them, so a daemon without doors never loads
uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator, Mapping, Sequence

import structlog
import uvicorn
from starlette.types import ASGIApp

from backthink.errors import BackthinkError
from backthink.host.descriptors import StormLog
from backthink.host.limits import (
    IDLE_S,
    PAGE_CONNECTIONS,
    REQUEST_S,
    bounded_protocol,
    listener_bounds,
)

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 10.0  # seconds for the server to begin accepting connections
STOP_TIMEOUT_S = 5.0  # seconds for the server to finish on shutdown
GRACEFUL_S = 2  # seconds open connections get to finish once the daemon stops


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The daemon owns SIGTERM and SIGINT; it stops this server itself when it drains.
        yield


class HttpServer:
    """One listener's server, running as a task of the daemon's event loop."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], url: str) -> None:
        """Wrap a started server; use `serve`."""
        self._server = server
        self._task = task
        self.url = url

    async def stop(self) -> None:
        """Stop accepting, let open requests finish briefly, and end the task."""
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("serving.stop_timeout", url=self.url)
        except Exception:
            log.exception("serving.failed", url=self.url)


async def serve(
    app: ASGIApp,
    address: tuple[str, int],
    *,
    key: str,
    listen: str,
    ready: Sequence[str],
    fields: Mapping[str, object] | None = None,
    max_connections: int = PAGE_CONNECTIONS,
    idle_s: float = IDLE_S,
    request_s: float = REQUEST_S,
) -> HttpServer:
    """Listen on `address` and serve `app` until `stop`; log each `ready` event once it does.

    At most `max_connections` connections are held (fewer when the process
    has few descriptors: see `backthink.host.limits`); one past them is
    answered 503 and closed at once, and each is closed once it has had no
    request under way for `idle_s` seconds (an event stream is a request under
    way); a request not all in within `request_s` of its first byte is
    answered 408 and closed. `fields` go into the ready lines beside the URL.

    `key` and `listen` name the setting in errors (`web.listen '...'`).

    Raises:
        BackthinkError: the address cannot be listened on (in use, not this machine's).
    """
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bounds = listener_bounds(max_connections)
    try:
        sock = _listening_socket(host, port, family, backlog=bounds.backlog)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise BackthinkError(f"{key} {listen!r}: cannot listen: {why}") from None
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_S,
        http=bounded_protocol(
            cap=bounds.connections,
            idle_s=idle_s,
            request_s=request_s,
            storm=StormLog(f"{key.partition('.')[0]}.connections_refused"),
        ),
        # The protocol refuses connections past the cap; uvicorn's own bound counts the
        # connection asking too, and bounds the requests running at once.
        limit_concurrency=bounds.connections + 1,
        backlog=bounds.backlog,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()
                    raise BackthinkError(f"{key} {listen!r}: the server did not start")
                await asyncio.sleep(0.01)
    except BaseException:
        task.cancel()
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    for event in ready:
        log.info(event, url=url, max_connections=bounds.connections, **(fields or {}))
    return HttpServer(server, task, url)


def _listening_socket(
    host: str, port: int, family: socket.AddressFamily, *, backlog: int
) -> socket.socket:
    """A listening TCP socket whose protocol is named.

    asyncio turns TCP_NODELAY on for accepted connections only when the
    listening socket names its protocol; with protocol 0, Nagle's algorithm and
    the client's delayed ACK would hold small responses back by ~40 ms.
    """
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock
