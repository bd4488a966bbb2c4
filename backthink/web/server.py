"""The page's routes (Starlette), served inside the daemon's own event loop (see `listen`).

The pages read the same stores the rounds write, through the daemon's `App`;
they never run a round and start nothing (no MCP server: a round's page shows
the tools it offered from its record). A page load costs a few indexed reads;
a round costs exactly what it costs without the page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any
from urllib.parse import parse_qs

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import backthink.web.pages as pages
import backthink.web.round_page as round_page
import backthink.web.static as static
from backthink.decision.reply import read_reply
from backthink.errors import BackthinkError, InputError, StoreError
from backthink.host.app import App
from backthink.host.fleet import Fleet
from backthink.host.limits import IDLE_S, PAGE_CONNECTIONS, REQUEST_S
from backthink.host.live import Live, LiveStatus
from backthink.host.serving import HttpServer, serve
from backthink.host.status import NOT_CONFIGURED, ModelProbe, Status, owner_status
from backthink.models import MemoryKind, Message
from backthink.records import RoundRecord
from backthink.round.pause import parse_pause_duration
from backthink.web.day import FIRST_DAY, LAST_DAY, day_bounds, in_range, lay_out, local_day
from backthink.web.guard import Guard

log = structlog.get_logger(__name__)

Handler = Callable[[Request], Awaitable[Response]]

DAY_ROUNDS = 2000  # rounds one day's page shows at most (a 1-minute heartbeat makes 1,440)
DAY_MESSAGES = 2000  # owner messages one day's page draws at most
API_ROUNDS_MAX = 1000  # rounds /api/rounds returns at most
MEMORIES_SHOWN = 200  # thoughts, and memories, listed at most on /memory
FORM_MAX_BYTES = 4096  # bytes of a form body; the page's forms send a few dozen
SECURITY_HEADERS = {
    # Nothing but the page's own stylesheet and script ever runs or loads, so even
    # text that slipped past escaping could not execute.
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class Pages:
    """The handlers of every route, over one owner's stores."""

    def __init__(self, app: App, owner_id: str, *, live: Live | None) -> None:
        """Serve `owner_id`'s rounds from `app`; `live` answers what only the daemon knows."""
        self._app = app
        self._owner = owner_id
        self._live = live
        self._tz = app.settings.owner.tz
        self._probe = ModelProbe(app.clock)

    async def status(self, *, probe_model: bool) -> Status:
        """The `status --json` object's data, read in this process (the daemon's)."""
        app = self._app
        if probe_model:
            model = await self._probe.health(app.settings.model, app.model)
        else:
            model = app.settings.model.name if app.model is not None else NOT_CONFIGURED
        return await owner_status(
            app.settings,
            self._owner,
            at=app.clock.now(),
            rounds=app.rounds,
            outbox=app.outbox,
            marks=app.marks,
            live=self._live(self._owner) if self._live is not None else LiveStatus(),
            model=model,
        )

    async def today(self, request: Request) -> Response:
        """GET /: today's timeline, by the owner's clock."""
        return await self._day(local_day(self._app.clock.now(), self._tz))

    async def day(self, request: Request) -> Response:
        """GET /day/YYYY-MM-DD: an earlier (or later) day's timeline."""
        try:
            day = date.fromisoformat(request.path_params["day"])
        except ValueError:
            return _page("Not a day", "Days are written YYYY-MM-DD.", 404)
        if not in_range(day):
            return _page("No such day", f"Days run from {FIRST_DAY} to {LAST_DAY}.", 404)
        return await self._day(day)

    async def _day(self, day: date) -> Response:
        s = self._app.settings
        records, messages = await self._day_data(day)
        line = lay_out(
            day,
            self._tz,
            rounds=records,
            owner_messages=messages,
            quiet=s.gate.quiet_hours,
            activity_window=s.gate.activity_window,
        )
        today = day == local_day(self._app.clock.now(), self._tz)
        newest = await self._app.rounds.list(owner_id=self._owner, limit=1) if today else []
        html = pages.day_page(
            line,
            records,
            await self.status(probe_model=False),
            self._tz,
            quiet_label=str(s.gate.quiet_hours) if s.gate.quiet_hours else "off",
            today=today,
            newest=newest[0].id if newest else "",
        )
        return HTMLResponse(html)

    async def _day_data(self, day: date) -> tuple[list[RoundRecord], list[Message]]:
        start, end = day_bounds(day, self._tz)
        records = await self._app.rounds.started_between(self._owner, start, end, limit=DAY_ROUNDS)
        messages = await self._app.messages.between(
            self._owner, start, end, role="user", limit=DAY_MESSAGES
        )
        return records, messages

    async def round(self, request: Request) -> Response:
        """GET /rounds/ID: one round in full."""
        record = await self._app.rounds.get(request.path_params["round_id"])
        if record is None or record.owner_id != self._owner:
            return _page("No such round", "There is no round with this id.", 404)
        delivery = await self._app.outbox.get(record.id)
        kept = await self._app.memories.list(self._owner, limit=MEMORIES_SHOWN)
        request_body, problem = await self._dry_run(record.trigger)
        html = round_page.round_page(
            record,
            self._tz,
            delivery=delivery,
            written=[m for m in kept if m.round_id == record.id],
            shown=await self._shown(record),
            request=request_body,
            request_problem=problem,
            servers=list(self._app.settings.tools.mcp),
            reply=None
            if record.raw_reply is None
            else read_reply(
                record.raw_reply,
                output=self._app.settings.model.output,
                max_body_chars=self._app.settings.gate.max_body_chars,
            ),
        )
        return HTMLResponse(html)

    async def _shown(self, record: RoundRecord) -> list[round_page.Shown]:
        """The memories and messages the round's prompt showed, as they are now."""
        refs = record.recalled
        memories = await self._app.memories.get_many(
            self._owner, [r.id for r in refs if r.kind != "message"]
        )
        messages = await self._app.messages.by_ids(
            self._owner, [r.id for r in refs if r.kind == "message"]
        )
        memory_texts = {m.id: m.text for m in memories}
        message_texts = {m.id: m.text for m in messages}
        return [
            round_page.Shown(r, (message_texts if r.kind == "message" else memory_texts).get(r.id))
            for r in refs
        ]

    async def _dry_run(self, trigger: str) -> tuple[dict[str, Any] | None, str | None]:
        """What `think --dry-run --trigger TRIGGER` would send now, or why it cannot say.

        No MCP server is started for it: a page view has no side effects, so
        their tools are left out of the tools shown.
        """
        from backthink.endpoint.body import request_body

        thinker = self._app.thinker
        try:
            request = await thinker.prepare(self._owner, trigger)
            tools = (await thinker.tool_offer(self._owner, servers=False)).definitions
        except BackthinkError as exc:
            return None, f"cannot assemble the request now: {exc}"
        return request_body(self._app.settings.model, request.messages, tools=tools), None

    async def memory(self, request: Request) -> Response:
        """GET /memory: the journal of thoughts and the memories, with forget buttons."""
        memories = self._app.memories
        thoughts = await memories.list(self._owner, kind=MemoryKind.THOUGHT, limit=MEMORIES_SHOWN)
        kept = [
            m
            for m in await memories.list(self._owner, limit=MEMORIES_SHOWN * 2)
            if m.kind is not MemoryKind.THOUGHT
        ][:MEMORIES_SHOWN]
        return HTMLResponse(pages.memory_page(thoughts, kept, self._tz))

    async def forget(self, request: Request) -> Response:
        """POST /memory/ID/forget: forget one memory, back to the list."""
        try:
            memory_id = int(request.path_params["memory_id"])
        except ValueError:
            return _page("No such memory", "Memory ids are numbers.", 404)
        if not await self._app.memories.forget(self._owner, memory_id):
            return _page("No such memory", f"There is no memory {memory_id}.", 404)
        log.info("web.forgot", owner_id=self._owner, memory_id=memory_id)
        return RedirectResponse("/memory", status_code=303)

    async def pause(self, request: Request) -> Response:
        """POST /pause: pause every trigger's rounds, until resumed or for a while."""
        form = await _form(request)
        length_text = form.get("for", "").strip()
        try:
            length = parse_pause_duration(length_text) if length_text else None
        except InputError as exc:
            return _page("Cannot pause", str(exc), 400)
        held = await self._app.pauses.pause(self._owner, at=self._app.clock.now(), length=length)
        log.info("web.paused", owner_id=self._owner, until=held.describe(self._tz))
        return RedirectResponse("/", status_code=303)

    async def resume(self, request: Request) -> Response:
        """POST /resume: end a pause."""
        await self._app.pauses.resume(self._owner, at=self._app.clock.now())
        log.info("web.resumed", owner_id=self._owner)
        return RedirectResponse("/", status_code=303)

    async def api_rounds(self, request: Request) -> Response:
        """GET /api/rounds[?day=YYYY-MM-DD][&limit=N]: rounds as `rounds --json` prints them."""
        query = request.query_params
        try:
            limit = min(max(int(query.get("limit", "50")), 0), API_ROUNDS_MAX)
            day = date.fromisoformat(query["day"]) if "day" in query else None
        except ValueError:
            return JSONResponse({"error": "limit is a number, day is YYYY-MM-DD"}, 400)
        if day is not None and not in_range(day):
            return JSONResponse({"error": f"day runs from {FIRST_DAY} to {LAST_DAY}"}, 400)
        if day is None:
            records = await self._app.rounds.list(owner_id=self._owner, limit=limit)
        else:
            start, end = day_bounds(day, self._tz)
            found = await self._app.rounds.started_between(self._owner, start, end, limit=limit)
            records = list(reversed(found))
        return JSONResponse([r.summary() for r in records])

    async def api_status(self, request: Request) -> Response:
        """GET /api/status: the `status --json` object."""
        return JSONResponse((await self.status(probe_model=True)).to_json())


async def _css(request: Request) -> Response:
    return Response(static.CSS, media_type="text/css")


async def _js(request: Request) -> Response:
    return Response(static.JS, media_type="text/javascript")


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form body; anything larger than the page's forms is cut off."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            break
    parsed = parse_qs(body[:FORM_MAX_BYTES].decode("utf-8", "replace"))
    return {key: values[0] for key, values in parsed.items()}


def _page(title: str, text: str, status: int) -> Response:
    return HTMLResponse(pages.message_page(title, text, status=status), status_code=status)


def _guarded(guard: Guard, handler: Handler) -> Handler:
    async def run(request: Request) -> Response:
        refusal = guard.check(request)
        if refusal is None:
            try:
                response = await handler(request)
            except StoreError as exc:
                log.warning("web.store_error", path=request.url.path, error=str(exc))
                response = _page("Database unavailable", str(exc), 503)
        else:
            response = refusal
        response.headers.update(SECURITY_HEADERS)
        return response

    return run


def build_asgi(app: App, owner_id: str, *, live: Live | None = None) -> Starlette:
    """The page as an ASGI application (tests may drive it without a socket)."""
    p = Pages(app, owner_id, live=live)
    guard = Guard(app.settings.web)
    routes: list[tuple[str, Handler, str]] = [
        ("/", p.today, "GET"),
        ("/day/{day}", p.day, "GET"),
        ("/rounds/{round_id}", p.round, "GET"),
        ("/memory", p.memory, "GET"),
        ("/memory/{memory_id}/forget", p.forget, "POST"),
        ("/pause", p.pause, "POST"),
        ("/resume", p.resume, "POST"),
        ("/api/rounds", p.api_rounds, "GET"),
        ("/api/status", p.api_status, "GET"),
        ("/static/page.css", _css, "GET"),
        ("/static/refresh.js", _js, "GET"),
    ]
    return Starlette(routes=[Route(path, _guarded(guard, h), methods=[m]) for path, h, m in routes])


WebServer = HttpServer
"""The page's server (the one listener it shares with the API when their addresses match)."""


async def start_web(
    app: App,
    owner_id: str,
    *,
    live: Live | None = None,
    max_connections: int = PAGE_CONNECTIONS,
    idle_s: float = IDLE_S,
    request_s: float = REQUEST_S,
) -> HttpServer:
    """Listen on `web.listen` and serve the page until `stop` (bounded as `serve` says).

    Raises:
        BackthinkError: the address cannot be listened on (in use, not this machine's).
    """
    web = app.settings.web
    address = web.address
    assert address is not None, "start_web needs web.listen"
    return await serve(
        build_asgi(app, owner_id, live=live),
        address,
        key="web.listen",
        listen=web.listen,
        ready=["web.ready"],
        fields={"token": web.secret is not None},
        max_connections=max_connections,
        idle_s=idle_s,
        request_s=request_s,
    )


async def page_app(fleet: Fleet, owners: list[str], live: Live) -> Starlette:
    """The page of the daemon's first owner as an ASGI application, to share a listener."""
    return build_asgi(await fleet.app(owners[0]), owners[0], live=live)


async def open_page(fleet: Fleet, owners: list[str], live: Live) -> HttpServer:
    """The daemon's doors when `[web] listen` is set: the page of its first owner."""
    return await start_web(await fleet.app(owners[0]), owners[0], live=live)
