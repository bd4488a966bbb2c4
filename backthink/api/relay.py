"""The relay: any OpenAI-compatible chat front-end becomes a companion.

`POST /v1/chat/completions` and `GET /v1/models` are forwarded to the
upstream (`relay.upstream`, else the `[model]` endpoint), streamed or not,
and the upstream's status, body (or SSE chunks, as they come) and the headers
that matter are passed back unchanged. On the way the relay

- stores the front-end's new user messages in the owner's main session
  before the call (a failed call keeps them, and no reply), and the reply
  once it is complete (see `backthink.api.turns` for what counts as new);
- puts the pushes the companion delivered since the front-end's previous turn
  into the forwarded request, as assistant messages right before the newest
  user message, so the owner's answer to a push has its context; the
  front-end's own messages are never changed.

Writes to the session run beside the upstream call, one owner's in order, so
the relay adds little to the call's latency. It never logs a message; it
counts each owner's requests and tokens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import structlog
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from backthink.api.access import Access
from backthink.api.bodies import Refusal, error_response, parse_json, read_body
from backthink.api.turns import Said, Turn, plan, with_pushes
from backthink.api.upstream import Completion, StreamReader, passed_headers, read_completion
from backthink.config import Settings
from backthink.errors import BackthinkError, InputError
from backthink.host.fleet import Fleet
from backthink.models import Message
from backthink.store.importing import parse_one

log = structlog.get_logger("backthink.relay")

SESSION_TAIL = 30  # newest session messages a turn is matched against
CONNECT_TIMEOUT_S = 10.0  # seconds to reach the upstream


@dataclass
class Usage:
    """What one owner's front-ends asked of the upstream through the relay."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        """`{"requests", "prompt_tokens", "completion_tokens"}`."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


class Relay:
    """Forwards chat completions for every owner of the fleet, and keeps the conversation."""

    def __init__(self, fleet: Fleet, access: Access, *, settings: Settings) -> None:
        """Forward to `relay.upstream`, else `model.base_url`, with the matching key."""
        self._fleet = fleet
        self._access = access
        self._session = fleet.stores.session
        self._limit = settings.api.max_body_bytes
        model = settings.model
        base = settings.relay.upstream or model.base_url
        self._base = base.rstrip("/") if base else None
        key = settings.relay.secret
        if key is None and model.api_key is not None:
            key = model.api_key.get_secret_value() or None
        self._headers = {"authorization": f"Bearer {key}"} if key else {}
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(model.timeout_s, connect=CONNECT_TIMEOUT_S)
        )
        self._turns: dict[str, asyncio.Lock] = {}
        # Per owner, the session write of the latest turn: the next turn waits for it.
        self._writing: dict[str, asyncio.Task[None]] = {}
        self._usage: dict[str, Usage] = {}

    def usage(self, owner_id: str) -> Usage:
        """The owner's requests and tokens through the relay since the daemon started."""
        return self._usage.get(owner_id, Usage())

    async def settled(self) -> None:
        """Wait until the session writes under way (turns and replies) are done."""
        while pending := [t for t in self._writing.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        """Finish the session writes under way and close the upstream connections."""
        await self.settled()
        await self._client.aclose()

    def _upstream(self, path: str) -> str:
        if self._base is None:
            raise Refusal(503, "no upstream: set relay.upstream or model.base_url")
        return f"{self._base}/{path}"

    async def models(self, request: Request) -> Response:
        """GET /v1/models: the upstream's answer, passed through."""
        await self._access.owner(request)
        url = self._upstream("models")
        try:
            answer = await self._client.get(url, headers=self._headers)
        except httpx2.HTTPError as exc:
            return _unreachable(exc)
        return Response(
            answer.content, status_code=answer.status_code, headers=passed_headers(answer.headers)
        )

    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions: record, forward, pass back."""
        started = time.perf_counter()
        owner_id = await self._access.owner(request)
        url = self._upstream("chat/completions")
        raw = await read_body(request, self._limit)
        body = parse_json(raw)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise Refusal(400, "messages: expected a list of chat messages")
        turn, writing = await self._begin(owner_id, body["messages"])
        forwarded = raw
        if turn.pushes:
            forwarded = json.dumps(
                {**body, "messages": with_pushes(body["messages"], turn)}, ensure_ascii=False
            ).encode()
        headers = {**self._headers, "content-type": "application/json"}
        counts = self._usage.setdefault(owner_id, Usage())
        counts.requests += 1
        done = _Done(self, owner_id, writing, started, len(turn.new), len(turn.pushes))
        if body.get("stream") is True:
            return await self._streamed(url, forwarded, headers, done)
        try:
            answer = await self._client.post(url, content=forwarded, headers=headers)
        except httpx2.HTTPError as exc:
            done.finish(None, status=None)
            return _unreachable(exc)
        done.finish(
            read_completion(answer.content) if answer.status_code == 200 else None,
            status=answer.status_code,
        )
        return Response(
            answer.content, status_code=answer.status_code, headers=passed_headers(answer.headers)
        )

    async def _begin(self, owner_id: str, messages: list[Any]) -> tuple[Turn, asyncio.Task[None]]:
        """Plan the turn against the session and start storing its new messages."""
        lock = self._turns.setdefault(owner_id, asyncio.Lock())
        async with lock:
            previous = self._writing.get(owner_id)
            if previous is not None:
                # The previous turn's messages go first, or this turn would not find them.
                await asyncio.gather(previous, return_exceptions=True)
            tail = await self._session.page(owner_id, after=None, limit=SESSION_TAIL) or []
            turn = plan(messages, tail)
            app = await self._fleet.app(owner_id)
            now = app.clock.now()
            new = [_user_message(said, owner_id, app.settings, now) for said in turn.new]
            writing = asyncio.create_task(self._append(owner_id, new))
            self._writing[owner_id] = writing
        return turn, writing

    async def _append(self, owner_id: str, messages: list[Message]) -> None:
        if not messages:
            return
        try:
            await self._session.append(messages)
        except BackthinkError as exc:
            log.warning("relay.not_stored", owner_id=owner_id, error=str(exc))

    async def _streamed(
        self, url: str, forwarded: bytes, headers: dict[str, str], done: _Done
    ) -> Response:
        request = self._client.build_request("POST", url, content=forwarded, headers=headers)
        try:
            answer = await self._client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            done.finish(None, status=None)
            return _unreachable(exc)
        kind = answer.headers.get("content-type", "")
        if answer.status_code != 200 or not kind.startswith("text/event-stream"):
            # An error (or an upstream that answered in one piece): passed back whole.
            content = await answer.aread()
            await answer.aclose()
            ok = answer.status_code == 200
            done.finish(read_completion(content) if ok else None, status=answer.status_code)
            return Response(
                content, status_code=answer.status_code, headers=passed_headers(answer.headers)
            )

        async def chunks() -> AsyncIterator[bytes]:
            reader = StreamReader()
            try:
                async for chunk in answer.aiter_raw():
                    reader.feed(chunk)
                    yield chunk
            finally:
                await answer.aclose()
                done.finish(reader.finish(), status=200, stream=True)

        return StreamingResponse(chunks(), headers=passed_headers(answer.headers))

    def _after(self, done: _Done, completion: Completion | None) -> None:
        """Count the tokens, and store a complete reply once the turn's messages are stored."""
        counts = self._usage.setdefault(done.owner_id, Usage())
        if completion is not None:
            counts.prompt_tokens += completion.prompt_tokens or 0
            counts.completion_tokens += completion.completion_tokens or 0
        reply = None
        if completion is not None and completion.complete and completion.text.strip():
            reply = completion.text
        task = asyncio.create_task(self._keep_reply(done.owner_id, done.writing, reply))
        self._writing[done.owner_id] = task

    async def _keep_reply(
        self, owner_id: str, writing: asyncio.Task[None], reply: str | None
    ) -> None:
        await asyncio.gather(writing, return_exceptions=True)
        if reply is None:
            return
        try:
            app = await self._fleet.app(owner_id)
            message = Message(
                owner_id=owner_id,
                role="assistant",
                text=reply,
                speaker=app.settings.persona.id,
                created_at=app.clock.now(),
            )
            await self._session.append([message])
        except BackthinkError as exc:
            log.warning("relay.reply_not_stored", owner_id=owner_id, error=str(exc))


@dataclass
class _Done:
    """One relayed call, finished once: counted, logged, its reply kept."""

    relay: Relay
    owner_id: str
    writing: asyncio.Task[None]
    started: float
    stored: int
    pushes: int
    finished: bool = False

    def finish(
        self, completion: Completion | None, *, status: int | None, stream: bool = False
    ) -> None:
        """Record how the call ended (status None: the upstream could not be reached)."""
        if self.finished:
            return
        self.finished = True
        self.relay._after(self, completion)
        log.info(
            "relay.finished",
            owner_id=self.owner_id,
            status=status,
            stream=stream,
            stored=self.stored,
            pushes=self.pushes,
            kept_reply=bool(completion and completion.complete and completion.text.strip()),
            prompt_tokens=completion.prompt_tokens if completion else None,
            completion_tokens=completion.completion_tokens if completion else None,
            latency_ms=round((time.perf_counter() - self.started) * 1000, 1),
        )


def _user_message(said: Said, owner_id: str, settings: Settings, now: Any) -> Message:
    """A front-end's user message as the session stores it, validated as an import line is."""
    data = {"role": "user", "text": said.text, "image": said.image}
    try:
        return parse_one(
            data, where=f"messages[{said.index}]", owner_id=owner_id, now=now, tz=settings.owner.tz
        )
    except InputError as exc:
        raise Refusal(400, str(exc)) from None


def _unreachable(exc: httpx2.HTTPError) -> Response:
    if isinstance(exc, httpx2.TimeoutException):
        return error_response(504, "the upstream did not answer in time", "openai")
    return error_response(502, f"the upstream cannot be reached ({type(exc).__name__})", "openai")
