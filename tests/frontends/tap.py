"""A recording pass-through between a front-end and the relay: what the front-end really sent.

The relay sends its upstream a request of its own (its key, its headers), so
the fake upstream never sees what the front-end sent. The tap sits in front
of the relay, on 127.0.0.1 and a free port, records every request as it came
(method, path, headers, body) and forwards it unchanged, streaming the answer
back as it arrives. Until `target` is set it answers 503.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 10.0  # seconds for the server to accept connections
SHUTDOWN_TIMEOUT_S = 5.0  # seconds for the server thread to finish
STARTED_POLL_S = 0.01  # seconds between checks of uvicorn's `started` flag
FORWARD_TIMEOUT_S = 120.0  # seconds a forwarded call may take (a streamed turn on a busy machine)
# Headers that belong to one hop, not to the message: never forwarded either way.
HOP_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"}
)


@dataclass(frozen=True)
class Tapped:
    """One request as the front-end sent it; headers lower-cased, in the order they came."""

    seq: int
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    """The parsed JSON body, the raw text when it is not JSON, None when empty."""


class Tap:
    """Records and forwards every request to `target` (a base URL such as the relay's)."""

    def __init__(self) -> None:
        """Prepare the server; `start()` (or `with`) runs it."""
        self.target: str | None = None
        self.port = 0
        self._lock = threading.Lock()
        self._records: list[Tapped] = []
        self._open = 0
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx2.AsyncClient | None = None
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
        self.app = Starlette(routes=[Route("/{path:path}", self._forward, methods=methods)])

    @property
    def base_url(self) -> str:
        """The address a front-end is pointed at, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{HOST}:{self.port}"

    @property
    def records(self) -> list[Tapped]:
        """Every request so far, oldest first."""
        with self._lock:
            return list(self._records)

    @property
    def open_calls(self) -> int:
        """Calls whose answer has not been passed back whole yet."""
        with self._lock:
            return self._open

    def start(self) -> Tap:
        """Bind a free port, serve in a thread, return once connections are accepted."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            loop="asyncio",
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="front-end-tap", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the tap did not start")
            time.sleep(STARTED_POLL_S)
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(SHUTDOWN_TIMEOUT_S)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> Tap:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        assert self._server is not None and self._socket is not None
        async with httpx2.AsyncClient(timeout=FORWARD_TIMEOUT_S) as client:
            self._client = client
            await self._server.serve(sockets=[self._socket])

    async def _forward(self, request: Request) -> Response:
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", errors="replace")
        with self._lock:
            record = Tapped(
                seq=len(self._records),
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
            )
            self._records.append(record)
            self._open += 1
        try:
            return await self._pass(request, raw)
        except BaseException:
            self._closed()
            raise

    async def _pass(self, request: Request, raw: bytes) -> Response:
        """Forward one request and stream its answer back; `_closed` runs once it is passed."""
        target, client = self.target, self._client
        if target is None or client is None:
            self._closed()
            return JSONResponse({"error": {"message": "the tap has no target yet"}}, 503)
        url = f"{target.rstrip('/')}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        upstream = client.build_request(request.method, url, content=raw, headers=headers)
        try:
            answer = await client.send(upstream, stream=True)
        except httpx2.HTTPError as exc:
            self._closed()
            message = f"the tap cannot reach its target ({type(exc).__name__})"
            return JSONResponse({"error": {"message": message}}, 502)
        passed = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS}

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in answer.aiter_raw():
                    yield piece
            finally:
                await answer.aclose()
                self._closed()

        return StreamingResponse(pieces(), status_code=answer.status_code, headers=passed)

    def _closed(self) -> None:
        with self._lock:
            self._open -= 1
