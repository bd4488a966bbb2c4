"""The relay: any OpenAI-compatible chat front-end becomes a companion.

`POST /v1/chat/completions`, `GET /v1/models` and `POST /v1/embeddings`
are forwarded to the upstream (`relay.upstream`, else the `[model]`
endpoint), streamed or not, and the upstream's status, body (or SSE chunks,
as they come) and the headers that matter are passed back; the same under
the task base URL `/v1/tasks/`. On the way the relay keeps the conversation
and shows the model the companion's pushes (`backthink.api.ledger`,
`backthink.api.turns`); the front-end's own messages are never changed. A
front-end's task (`backthink.api.tasks`) and an embedding are forwarded as
they came and kept nowhere. A streamed turn is metered: the relay asks the
upstream for usage and hands the client only what it asked for
(`backthink.api.metering`). Each turn of the conversation is one of the
owner's live turns (`backthink.host.turns`) from its arrival to its end; one
that arrives beside others is told of them (`backthink.api.parallel`). A
call answered whole is bounded as a whole by `model.timeout_s`.

Every upstream call carries the same headers: the key, and
`accept-encoding: identity`, so the bytes passed on are the ones the
upstream meant, never a compressed body without its header. A non-streamed
answer is read up to `ANSWER_MAX_BYTES`. A stream that breaks off (the
upstream stalls past `model.timeout_s`, drops the connection, or the daemon
stops) ends with one OpenAI-style `data: {"error": ...}` event, as an
OpenAI-compatible server reports an error mid-stream, and the call is logged
with what really happened.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import structlog
from starlette.requests import Request
from starlette.responses import Response

from backthink.api.access import Access
from backthink.api.bodies import read_json_body, whole_number
from backthink.api.headers import ids_of
from backthink.api.ledger import GONE, Call, Ledger, Usage
from backthink.api.metering import UsageFilter, ask_usage
from backthink.api.parallel import client_message_id, notice, tools_called, with_notice
from backthink.api.placing import with_pushes
from backthink.api.refusals import Refusal, error_body, error_response
from backthink.api.responses import EndingStream
from backthink.api.tasks import TASK_HEADER, task_of
from backthink.api.upstream import StreamReader, passed_headers, read_completion
from backthink.config import Settings
from backthink.host.fleet import Fleet
from backthink.host.turns import RelayTurn
from backthink.models import Language
from backthink.redact import redact_url

log = structlog.get_logger(__name__)

CONNECT_TIMEOUT_S = 10.0  # seconds to reach the upstream
ANSWER_MAX_BYTES = 64 * 1024 * 1024  # a non-streamed answer larger than this is not passed on
# An upstream that answers one of these naming the option lacks `stream_options`.
USAGE_REFUSED = frozenset({400, 422})
USAGE_WORDS = (b"stream_options", b"include_usage")


class _Stopping(Exception):  # noqa: N818 - a signal inside the relay, never raised beyond it
    """The daemon is stopping: open streams end now."""


class _TooLarge(Exception):  # noqa: N818 - a signal inside the relay, never raised beyond it
    """An upstream answer past the bound."""


class Relay:
    """Forwards chat completions for every owner of the fleet, and keeps the conversation."""

    def __init__(
        self,
        fleet: Fleet,
        access: Access,
        *,
        settings: Settings,
        max_answer_bytes: int = ANSWER_MAX_BYTES,
    ) -> None:
        """Forward to `relay.upstream`, else `model.base_url`, with the matching key."""
        self._access = access
        self._limit = settings.api.max_body_bytes
        self._max_answer = max_answer_bytes
        model = settings.model
        self._whole_s = model.timeout_s  # seconds an answer read whole may take, all of it
        base = settings.relay.upstream or model.base_url
        self._base = base.rstrip("/") if base else None
        self._where = redact_url(self._base or "")
        key = settings.relay.secret
        if key is None and model.api_key is not None:
            key = model.api_key.get_secret_value() or None
        headers = {"accept-encoding": "identity"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(model.timeout_s, connect=CONNECT_TIMEOUT_S), headers=headers
        )
        self.ledger = Ledger(fleet)
        self._fleet = fleet
        self._stopping = asyncio.Event()
        # Set once the upstream refused a request only for asking for usage: never asked again.
        self._no_usage = False

    def usage(self, owner_id: str) -> Usage:
        """The owner's requests and tokens through the relay since the daemon started."""
        return self.ledger.usage(owner_id)

    async def settled(self) -> None:
        """Wait until the session writes under way (turns and replies) are done."""
        await self.ledger.settled()

    def end_streams(self) -> None:
        """End every stream under way with an error event (the daemon is stopping)."""
        self._stopping.set()

    async def close(self) -> None:
        """End the streams, finish the session writes under way, close the upstream connections."""
        self.end_streams()
        await self.settled()
        await self._client.aclose()

    def _upstream(self, path: str) -> str:
        """The upstream's URL for `path`; a 503 when none is configured."""
        if self._base is None:
            raise Refusal(503, "no upstream: set relay.upstream or model.base_url")
        return f"{self._base}/{path}"

    async def models(self, request: Request) -> Response:
        """GET /v1/models: the upstream's answer, passed through."""
        await self._access.owner(request)
        return await self._passed(self._client.build_request("GET", self._upstream("models")))

    async def embeddings(self, request: Request) -> Response:
        """POST /v1/embeddings: forwarded as it came, kept nowhere."""
        await self._access.owner(request)
        url = self._upstream("embeddings")
        raw = (await read_json_body(request, self._limit, root="")).raw
        headers = {"content-type": "application/json"}
        return await self._passed(
            self._client.build_request("POST", url, content=raw, headers=headers)
        )

    async def _passed(self, upstream: httpx2.Request) -> Response:
        """The upstream's answer to a request the relay keeps nothing of, passed back whole."""
        try:
            async with asyncio.timeout(self._whole_s):
                answer = await self._client.send(upstream, stream=True)
                content = await self._read(answer)
        except (httpx2.HTTPError, TimeoutError) as exc:
            return error_response(*_failure(exc, self._where), "openai")
        except _TooLarge:
            return error_response(502, self._too_large, "openai")
        return Response(
            content, status_code=answer.status_code, headers=passed_headers(answer.headers)
        )

    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions: record, forward, pass back."""
        return await self._chat(request, tasks_path=False)

    async def task_chat(self, request: Request) -> Response:
        """POST /v1/tasks/chat/completions: a front-end's task, forwarded and kept nowhere."""
        return await self._chat(request, tasks_path=True)

    async def _chat(self, request: Request, *, tasks_path: bool) -> Response:
        """Record (unless a task), forward, pass back."""
        started = time.perf_counter()
        owner_id = await self._access.owner(request)
        url = self._upstream("chat/completions")
        got = await read_json_body(request, self._limit, root="")
        raw, body = got.raw, got.data
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise Refusal(400, "messages: expected a list of chat messages")
        task = task_of(body, header=request.headers.get(TASK_HEADER), tasks_path=tasks_path)
        if task is not None:
            # A front-end's bookkeeping is no turn of the owner's: not counted among them.
            call = self.ledger.begin_task(owner_id, task, started=started)
            return await self._forward(call, url, raw, body, None)
        live = self._fleet.turns.relay(owner_id, client_message_id(request.headers))
        live.called(tools_called(body["messages"]))
        try:
            ids = ids_of(request.headers)
            call = await self.ledger.begin(owner_id, body["messages"], started=started, ids=ids)
            call.live = live
            return await self._forward(call, url, raw, body, live)
        except BaseException:
            live.end()  # cut short (a refusal, the client gone): no longer in flight
            raise

    async def _forward(
        self,
        call: Call,
        url: str,
        raw: bytes,
        body: dict[str, Any],
        live: RelayTurn | None,
    ) -> Response:
        """Forward a call the ledger began, pass the answer back; the call's end ends its turn."""
        stream = body.get("stream") is True
        plain, asked = raw, None
        if call.task is None:
            told = notice(live.alongside, self._language(call.owner_id)) if live else None
            if call.turn.placed or told is not None:
                messages = body["messages"]
                if call.turn.placed:
                    messages = with_pushes(messages, call.turn.placed)
                if told is not None:
                    messages = with_notice(messages, told)
                body = {**body, "messages": messages}
                plain = _encoded(body)
            asked = None if self._no_usage else ask_usage(body)
        metered = asked is not None
        content: bytes | None = None  # the answer, when it had to be read already
        if live is not None:
            live.asking()
        # A call answered whole is bounded as a whole: connecting, the headers and every
        # byte of the body within model.timeout_s, however slowly the upstream dribbles
        # them (the client's read timeout bounds each read, never their sum).
        deadline = None if stream else asyncio.get_running_loop().time() + self._whole_s
        try:
            async with asyncio.timeout_at(deadline):
                answer = await self._send(url, plain if asked is None else _encoded(asked))
                if metered and answer.status_code in USAGE_REFUSED:
                    content = await self._read(answer)
                    if any(word in content for word in USAGE_WORDS):
                        # An upstream without `stream_options`: asked again as the client asked.
                        self._no_usage, metered, content = True, False, None
                        log.info("relay.usage_refused", status=answer.status_code)
                        answer = await self._send(url, plain)
        except (httpx2.HTTPError, TimeoutError) as exc:
            status, message = _failure(exc, self._where)
            self.ledger.finish(call, None, status=None, stream=stream, error=message)
            return error_response(status, message, "openai")
        except _TooLarge:
            self.ledger.finish(call, None, status=None, stream=stream, error=self._too_large)
            return error_response(502, self._too_large, "openai")
        kind = answer.headers.get("content-type", "")
        if stream and answer.status_code == 200 and kind.startswith("text/event-stream"):

            async def end() -> None:
                # Only when the body never began: then nobody counted the call.
                self.ledger.finish(call, None, status=200, stream=True, error=GONE)
                await answer.aclose()

            return EndingStream(
                self._stream(answer, call, UsageFilter() if metered else None),
                on_end=end,
                headers=passed_headers(answer.headers),
            )
        # Not streamed, an error, or an upstream that answered in one piece: passed back whole.
        try:
            if content is None:
                async with asyncio.timeout_at(deadline):
                    content = await self._read(answer)
        except (httpx2.HTTPError, TimeoutError) as exc:
            status, message = _failure(exc, self._where)
            self.ledger.finish(call, None, status=None, stream=stream, error=message)
            return error_response(status, message, "openai")
        except _TooLarge:
            self.ledger.finish(call, None, status=None, stream=stream, error=self._too_large)
            return error_response(502, self._too_large, "openai")
        ok = answer.status_code == 200
        self.ledger.finish(
            call, read_completion(content) if ok else None, status=answer.status_code, stream=stream
        )
        return Response(
            content, status_code=answer.status_code, headers=passed_headers(answer.headers)
        )

    def _language(self, owner_id: str) -> Language:
        """The owner's prompt language (its app is wired by now), for the parallel notice."""
        app = self._fleet.cached(owner_id)
        return (app.settings if app is not None else self._fleet.settings).prompt.language

    async def _send(self, url: str, content: bytes) -> httpx2.Response:
        """POST a JSON body upstream; the answer's body is read as it comes.

        Raises:
            httpx2.HTTPError: the upstream cannot be reached.
        """
        upstream = self._client.build_request(
            "POST", url, content=content, headers={"content-type": "application/json"}
        )
        return await self._client.send(upstream, stream=True)

    @property
    def _too_large(self) -> str:
        """What a client is told of an answer past the bound."""
        return f"the upstream's answer is larger than {self._max_answer} bytes"

    async def _read(self, answer: httpx2.Response) -> bytes:
        """A whole answer, up to the bound; the response is closed either way.

        Raises:
            _TooLarge: the answer (or its announced length) passes the bound.
            httpx2.HTTPError: the upstream broke off or stalled.
        """
        try:
            announced = whole_number(answer.headers.get("content-length", ""))
            if announced is not None and announced > self._max_answer:
                raise _TooLarge
            pieces: list[bytes] = []
            size = 0
            async for piece in answer.aiter_bytes():
                size += len(piece)
                if size > self._max_answer:
                    raise _TooLarge
                pieces.append(piece)
            return b"".join(pieces)
        finally:
            await answer.aclose()

    async def _stream(
        self, answer: httpx2.Response, call: Call, usage: UsageFilter | None
    ) -> AsyncIterator[bytes]:
        """The upstream's SSE chunks as they come, read for the reply on the way.

        With `usage`, the usage the relay asked for is read and not handed on.
        """
        reader = StreamReader()
        status, error = 200, None
        try:
            async for piece in self._pieces(answer):
                reader.feed(piece)
                if call.live is not None:
                    call.live.streamed(reader.chars, reader.tools)
                passed = piece if usage is None else usage.feed(piece)
                if passed:
                    yield passed
            if usage is not None and (rest := usage.finish()):
                yield rest
        except httpx2.HTTPError as exc:
            status, error = _failure(exc, self._where)
            yield _error_event(status, error)
        except _Stopping:
            status, error = 503, "the companion is restarting: send the message again"
            yield _error_event(status, error)
        except (asyncio.CancelledError, GeneratorExit):
            error = GONE
            raise
        finally:
            self.ledger.finish(call, reader.finish(), status=status, stream=True, error=error)
            # Shielded: a client that went away cancels this task, and the connection
            # must still go back to the pool (or be closed) rather than leak.
            await asyncio.shield(answer.aclose())

    async def _pieces(self, answer: httpx2.Response) -> AsyncIterator[bytes]:
        """The answer's (decoded) bytes, until it ends or the daemon stops.

        Raises:
            _Stopping: the daemon is stopping.
            httpx2.HTTPError: the upstream broke off or stalled.
        """
        pieces = answer.aiter_bytes()
        stopping = asyncio.ensure_future(self._stopping.wait())
        step: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(pieces, None))
                await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise _Stopping
                piece = step.result()
                if piece is None:
                    return
                yield piece
        finally:
            stopping.cancel()
            if step is not None:
                step.cancel()


def _encoded(body: dict[str, Any]) -> bytes:
    """A request body as the upstream gets it: UTF-8 JSON, characters kept as they are."""
    return json.dumps(body, ensure_ascii=False).encode()


def _failure(exc: httpx2.HTTPError | TimeoutError, where: str) -> tuple[int, str]:
    """The status and words for an upstream that could not be reached, broke off or was late.

    `where` names the upstream (its address, without credentials), so an owner
    who set a wrong URL sees which one is wrong.
    """
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return 504, f"the upstream {where} did not answer in time"
    return 502, f"the upstream {where} cannot be reached or broke off ({type(exc).__name__})"


def _error_event(status: int, message: str) -> bytes:
    """An OpenAI-style error as one SSE event, the way such a server ends a stream that failed."""
    data = json.dumps(error_body(status, message, "openai"), ensure_ascii=False)
    return f"data: {data}\n\n".encode()
