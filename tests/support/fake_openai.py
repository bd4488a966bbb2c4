"""A real local HTTP server that speaks the chat-completions API, for tests and process tests.

In a test::

    with FakeOpenAI() as fake:
        fake.script("hello", Fail(500), Reply("later", delay_s=0.5))
        ...  # point a client at fake.base_url
        assert fake.chat_requests[0].body["model"] == "m"

As a process (the daemon's process tests)::

    python tests/support/fake_openai.py --port 0 --reply "[decision:no_push]"
    python tests/support/fake_openai.py --replies replies.jsonl
    python tests/support/fake_openai.py --right eval/scenarios.jsonl

With ``--right FILE`` (or ``fake.responder = RightReplies.from_file(FILE)``) every
request of ``backthink eval`` on that scenario file is answered with the reply its
scenario (or day beat) expects: a push at the expected urgency naming the first
expected word, or no push, in the request's output form.

A request with ``"stream": true`` gets its reply as chat-completion chunks (Server-Sent
Events), ended by ``data: [DONE]``.

The process prints one line, ``FAKE_OPENAI_READY http://127.0.0.1:PORT/v1``, once it
accepts connections, and stops cleanly on SIGTERM or SIGINT. A replies file holds one
script item per line in the JSON form that `item_from_json` reads. Control endpoints let
a test script and inspect a running process: ``POST /_fake/script`` (a JSON list of
items), ``POST /_fake/fail`` ({"count": N, "status": S}), ``POST /_fake/reset`` and
``GET /_fake/requests``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import socket
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

if __package__ in (None, ""):
    # Run as a file (`python tests/support/fake_openai.py`): the tests folder joins the path
    # so the support package's other modules import as they do inside the suite.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.fake_script import (
    RETRY_NOW_S,
    EmptyChoices,
    Fail,
    Malformed,
    Reply,
    ScriptItem,
    ToolCalls,
    item_from_json,
    load_replies,
    message_text,
    rough_tokens,
)
from support.right_replies import RightReplies

HOST = "127.0.0.1"
DEFAULT_MODEL = "fake-model"
DEFAULT_REPLY = "[decision:no_push]"
STARTUP_TIMEOUT_S = 10.0  # seconds to wait for the server to accept connections
SHUTDOWN_TIMEOUT_S = 5.0  # seconds to wait for the server thread to finish
STARTED_POLL_S = 0.005  # seconds between checks of uvicorn's `started` flag
STREAM_PIECE = 8  # characters of a streamed reply per chunk
# What llama-cpp-python's server answers for a response_format type it does not read.
SCHEMA_FORM_MESSAGE = "body.response_format.type: Input should be 'text' or 'json_object'"
# What llama.cpp's server answers when it runs a model without a vision projector.
TEXT_ONLY_MESSAGE = (
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
)


TOOLS_MODES = ("script", "ignore", "call")
"""How the server treats a request's tools: as scripted; dropped, as llama.cpp's server
does without a tool-call chat format (no reply ever calls a tool); or, when nothing
is scripted, answered by a call of the first tool offered, with no arguments."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received: headers are lower-cased, body is parsed JSON or raw text."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None

    def to_json(self) -> dict[str, Any]:
        """Return the request as a JSON-ready dict."""
        return asdict(self)


@dataclass
class _State:
    """Everything the handlers read and tests change; guarded by `lock`."""

    default_reply: str
    model_ids: list[str]
    models_endpoint: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    queue: deque[ScriptItem] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    fail_count: int = 0
    fail_status: int = 500
    fail_retry_after_s: float | None = RETRY_NOW_S
    image_refusal: int | None = None
    schema_refusal: int | None = None
    gzip_streams: str | None = None
    tools_mode: str = "script"
    responder: Callable[[dict[str, Any]], str] | None = None


def _has_image(body: dict[str, Any]) -> bool:
    """Whether any message of a chat request carries an image part."""
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "image_url" for part in content
        ):
            return True
    return False


def _tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the functions a chat request offers, in order."""
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _retry_headers(retry_after_s: float | None) -> dict[str, str]:
    if retry_after_s is None:
        return {}
    return {
        "retry-after-ms": f"{retry_after_s * 1000:g}",
        "retry-after": f"{retry_after_s:g}",
    }


class FakeOpenAI:
    """A chat-completions server on 127.0.0.1 and a random free port, run in a thread.

    Scripted items are answered in order; once the queue is empty every chat request
    gets `default_reply`. `fail_next` makes the next requests (chat or models) fail
    before the queue is touched. Every request is recorded, failed ones included.
    """

    def __init__(
        self,
        *,
        default_reply: str = DEFAULT_REPLY,
        model_ids: Iterable[str] = (DEFAULT_MODEL,),
        models_endpoint: bool = True,
        port: int = 0,
    ) -> None:
        """Prepare the server; `start()` (or `with`) runs it.

        Args:
            default_reply: the text answered when no scripted item is queued.
            model_ids: the models `GET /v1/models` lists.
            models_endpoint: False makes `GET /v1/models` answer 404, like some local servers.
            port: the port to bind; 0 picks a free one.
        """
        self._state = _State(default_reply, list(model_ids), models_endpoint)
        self._initial = (default_reply, models_endpoint)
        self._requested_port = port
        self._ids = itertools.count(1)
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self.port = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/_fake/script", self._control_script, methods=["POST"]),
                Route("/_fake/fail", self._control_fail, methods=["POST"]),
                Route("/_fake/reset", self._control_reset, methods=["POST"]),
                Route("/_fake/requests", self._control_requests, methods=["GET"]),
            ]
        )

    # -- scripting and inspection -------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The base URL a client uses, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def default_reply(self) -> str:
        """The text answered when the queue is empty."""
        return self._state.default_reply

    @default_reply.setter
    def default_reply(self, text: str) -> None:
        with self._state.lock:
            self._state.default_reply = text

    @property
    def models_endpoint(self) -> bool:
        """Whether `GET /v1/models` is served (False answers 404)."""
        return self._state.models_endpoint

    @models_endpoint.setter
    def models_endpoint(self, enabled: bool) -> None:
        with self._state.lock:
            self._state.models_endpoint = enabled

    def script(self, *items: ScriptItem | str) -> None:
        """Queue replies for the next chat requests; a plain string is `Reply(text)`."""
        with self._state.lock:
            self._state.queue.extend(Reply(i) if isinstance(i, str) else i for i in items)

    @property
    def responder(self) -> Callable[[dict[str, Any]], str] | None:
        """None answers the default reply; a function answers each unscripted request itself.

        It gets the request body and returns the reply text; a LookupError it raises
        becomes an HTTP 500 naming it.
        """
        return self._state.responder

    @responder.setter
    def responder(self, function: Callable[[dict[str, Any]], str] | None) -> None:
        with self._state.lock:
            self._state.responder = function

    @property
    def image_refusal(self) -> int | None:
        """None serves images; a status makes every request with an image part fail with it.

        The error body is llama.cpp's for a model without a vision projector, so
        the server behaves like a text-only endpoint until `reset()`.
        """
        return self._state.image_refusal

    @image_refusal.setter
    def image_refusal(self, status: int | None) -> None:
        with self._state.lock:
            self._state.image_refusal = status

    @property
    def schema_refusal(self) -> int | None:
        """None takes every response_format; a status refuses ``{"type": "json_schema"}`` with it.

        The message is what llama-cpp-python's server answers: it reads only
        ``{"type": "json_object", "schema": ...}``, until `reset()`.
        """
        return self._state.schema_refusal

    @schema_refusal.setter
    def schema_refusal(self, status: int | None) -> None:
        with self._state.lock:
            self._state.schema_refusal = status

    @property
    def gzip_streams(self) -> str | None:
        """How streams are sent: None as they are, "accepted" or "always" gzip-compressed.

        "accepted" gzips a stream when the request accepts gzip, as a server
        behind a compressing proxy does; "always" gzips every stream.
        """
        return self._state.gzip_streams

    @gzip_streams.setter
    def gzip_streams(self, mode: str | None) -> None:
        with self._state.lock:
            self._state.gzip_streams = mode

    @property
    def tools_mode(self) -> str:
        """One of TOOLS_MODES; `script` until set, and again after `reset()`."""
        return self._state.tools_mode

    @tools_mode.setter
    def tools_mode(self, mode: str) -> None:
        if mode not in TOOLS_MODES:
            raise ValueError(f"tools_mode must be one of {TOOLS_MODES}, not {mode!r}")
        with self._state.lock:
            self._state.tools_mode = mode

    def fail_next(
        self, count: int, status: int = 500, *, retry_after_s: float | None = RETRY_NOW_S
    ) -> None:
        """Answer the next `count` requests (chat or models) with HTTP `status`."""
        with self._state.lock:
            self._state.fail_count = count
            self._state.fail_status = status
            self._state.fail_retry_after_s = retry_after_s

    @property
    def pending(self) -> int:
        """How many scripted items have not been used yet."""
        with self._state.lock:
            return len(self._state.queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The chat-completion requests received so far, oldest first."""
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def reset(self) -> None:
        """Forget requests, script and pending failures; restore the constructor's settings."""
        with self._state.lock:
            self._state.queue.clear()
            self._state.requests.clear()
            self._state.fail_count = 0
            self._state.image_refusal = None
            self._state.schema_refusal = None
            self._state.gzip_streams = None
            self._state.tools_mode = "script"
            self._state.responder = None
            self._state.default_reply, self._state.models_endpoint = self._initial

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        """Bind, serve in a background thread, and return once connections are accepted.

        Raises:
            RuntimeError: the server did not come up within STARTUP_TIMEOUT_S.
        """
        if self._thread is not None:
            raise RuntimeError("the fake server is already running")
        # Binding here, before the thread starts, makes the port known and reserved at once.
        # The protocol is named so that asyncio turns on TCP_NODELAY for accepted
        # connections (it checks `proto`); with proto 0, Nagle's algorithm and the
        # client's delayed ACK would hold every response body back by ~40 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, self._requested_port))
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            loop="asyncio",
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,  # leave the test process's logging configuration alone
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="fake-openai", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(STARTED_POLL_S)
        return self

    def stop(self) -> None:
        """Stop serving; pending delayed replies are cut short so shutdown stays quick."""
        if self._server is not None:
            self._server.should_exit = True
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None:
            with contextlib.suppress(RuntimeError):  # the loop may have closed already
                loop.call_soon_threadsafe(closing.set)
        if self._thread is not None:
            self._thread.join(SHUTDOWN_TIMEOUT_S)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
        self._loop = self._closing = None

    def __enter__(self) -> FakeOpenAI:
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
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        await self._server.serve(sockets=[self._socket])

    # -- handlers -----------------------------------------------------------------------

    async def _record(self, request: Request) -> RecordedRequest:
        raw = (await request.body()).decode("utf-8", errors="replace")
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        recorded = RecordedRequest(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        with self._state.lock:
            self._state.requests.append(recorded)
        return recorded

    def _take_failure(self) -> Fail | None:
        with self._state.lock:
            if self._state.fail_count <= 0:
                return None
            self._state.fail_count -= 1
            return Fail(self._state.fail_status, self._state.fail_retry_after_s)

    async def _pause(self, delay_s: float) -> None:
        if delay_s <= 0 or self._closing is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), delay_s)

    async def _chat(self, request: Request) -> Response:
        recorded = await self._record(request)
        failure = self._take_failure()
        if failure is not None:
            return _error(failure.status, _retry_headers(failure.retry_after_s))
        if not isinstance(recorded.body, dict):
            return _error(400, {}, "request body is not a JSON object")
        refusal = self._state.image_refusal
        if refusal is not None and _has_image(recorded.body):
            return _error(refusal, {}, TEXT_ONLY_MESSAGE)
        schema_refusal = self._state.schema_refusal
        response_format = recorded.body.get("response_format")
        if (
            schema_refusal is not None
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            return _error(schema_refusal, {}, SCHEMA_FORM_MESSAGE)
        with self._state.lock:
            mode = self._state.tools_mode
            responder = self._state.responder
            offered = _tool_names(recorded.body) if mode != "ignore" else []
            item: ScriptItem | None = None
            if self._state.queue:
                item = self._state.queue.popleft()
            elif mode == "call" and offered:
                item = ToolCalls(((offered[0], {}),))
            elif responder is None:
                item = Reply(self._state.default_reply)
            if mode == "ignore" and isinstance(item, ToolCalls):
                item = Reply(item.text or self._state.default_reply, delay_s=item.delay_s)
        if item is None:
            assert responder is not None
            try:
                item = Reply(responder(recorded.body))
            except LookupError as exc:
                return _error(500, {}, f"no scripted answer: {exc}")
        await self._pause(item.delay_s)
        if isinstance(item, Fail):
            return _error(item.status, _retry_headers(item.retry_after_s), item.message)
        if isinstance(item, Malformed):
            return Response(item.body, media_type="application/json")
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": recorded.body.get("model", DEFAULT_MODEL),
            "choices": [],
        }
        if isinstance(item, EmptyChoices):
            return JSONResponse(completion)
        text = item.text if isinstance(item, Reply | ToolCalls) else None
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
        if isinstance(item, ToolCalls):
            finish = "tool_calls"
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
                for name, args in item.calls
            ]
        elif item.reasoning is not None:
            message["reasoning_content"] = item.reasoning
        if recorded.body.get("stream") is True and isinstance(item, Reply):
            mode = self._state.gzip_streams
            accepted = "gzip" in recorded.headers.get("accept-encoding", "")
            gzip = mode == "always" or (mode == "accepted" and accepted)
            return self._stream(completion, item, recorded.body, gzip=gzip)
        completion["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
        if not isinstance(item, Reply) or item.usage:
            prompt = " ".join(message_text(m) for m in recorded.body.get("messages") or [])
            completion_tokens = rough_tokens(text) if text else 0
            completion["usage"] = {
                "prompt_tokens": rough_tokens(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": rough_tokens(prompt) + completion_tokens,
            }
        return JSONResponse(completion)

    def _stream(
        self, completion: dict[str, Any], item: Reply, body: dict[str, Any], *, gzip: bool = False
    ) -> Response:
        """A streamed reply: a role chunk, the text in pieces, a finish chunk, [DONE].

        Usage follows in a chunk of its own when `stream_options.include_usage` asks for it.
        With `gzip`, the stream is gzip-compressed, each event flushed as it goes.
        """
        base = {**completion, "object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

        pieces = [item.text[i : i + STREAM_PIECE] for i in range(0, len(item.text), STREAM_PIECE)]
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True

        async def events() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            for piece in pieces:
                await self._pause(item.stream_delay_s)
                yield chunk({"content": piece})
            yield chunk({}, "stop")
            if usage:
                prompt = " ".join(message_text(m) for m in body.get("messages") or [])
                counts = {
                    "prompt_tokens": rough_tokens(prompt),
                    "completion_tokens": rough_tokens(item.text),
                    "total_tokens": rough_tokens(prompt) + rough_tokens(item.text),
                }
                yield f"data: {json.dumps({**base, 'choices': [], 'usage': counts})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        if not gzip:
            return StreamingResponse(events(), media_type="text/event-stream")

        async def compressed() -> Any:
            packer = zlib.compressobj(wbits=31)  # 31: the gzip format
            async for event in events():
                yield packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH)
            yield packer.flush()

        return StreamingResponse(
            compressed(), media_type="text/event-stream", headers={"content-encoding": "gzip"}
        )

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        failure = self._take_failure()
        if failure is not None:
            return _error(failure.status, _retry_headers(failure.retry_after_s))
        with self._state.lock:
            enabled, ids = self._state.models_endpoint, list(self._state.model_ids)
        if not enabled:
            return _error(404, {}, "not found")
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "fake"} for i in ids]
        return JSONResponse({"object": "list", "data": data})

    async def _embeddings(self, request: Request) -> Response:
        """One small vector per input, as an OpenAI-compatible server answers."""
        recorded = await self._record(request)
        failure = self._take_failure()
        if failure is not None:
            return _error(failure.status, _retry_headers(failure.retry_after_s))
        given = recorded.body.get("input") if isinstance(recorded.body, dict) else None
        inputs = given if isinstance(given, list) else [given]
        data = [
            {"object": "embedding", "index": i, "embedding": [0.0, 0.5, 1.0]}
            for i in range(len(inputs))
        ]
        usage = {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}
        return JSONResponse(
            {"object": "list", "data": data, "model": DEFAULT_MODEL, "usage": usage}
        )

    async def _control_script(self, request: Request) -> Response:
        try:
            items = [item_from_json(v) for v in json.loads(await request.body())]
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        self.script(*items)
        return JSONResponse({"pending": self.pending})

    async def _control_fail(self, request: Request) -> Response:
        spec = json.loads(await request.body())
        retry = spec.get("retry_after_s", RETRY_NOW_S)
        self.fail_next(int(spec["count"]), int(spec.get("status", 500)), retry_after_s=retry)
        return JSONResponse({"ok": True})

    async def _control_reset(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"ok": True})

    async def _control_requests(self, request: Request) -> Response:
        return JSONResponse([r.to_json() for r in self.requests])


def _error(status: int, headers: dict[str, str], message: str = "scripted failure") -> Response:
    body = {"error": {"message": message, "type": "fake_error", "code": str(status)}}
    return JSONResponse(body, status_code=status, headers=headers)


def main(argv: list[str] | None = None) -> int:
    """Run the fake server as a process until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--reply", default=DEFAULT_REPLY, help="default reply text")
    parser.add_argument("--replies", type=Path, help="JSON Lines file of scripted items")
    parser.add_argument(
        "--right", type=Path, help="answer each scenario of this eval file as it expects"
    )
    parser.add_argument("--model", action="append", help="a model id /v1/models lists")
    parser.add_argument("--no-models", action="store_true", help="answer 404 on /v1/models")
    parser.add_argument("--tools-mode", choices=TOOLS_MODES, default="script")
    args = parser.parse_args(argv)

    fake = FakeOpenAI(
        default_reply=args.reply,
        model_ids=args.model or [DEFAULT_MODEL],
        models_endpoint=not args.no_models,
        port=args.port,
    )
    fake.tools_mode = args.tools_mode
    if args.replies is not None:
        fake.script(*load_replies(args.replies))
    if args.right is not None:
        fake.responder = RightReplies.from_file(args.right)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with fake:
        print(f"FAKE_OPENAI_READY {fake.base_url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
