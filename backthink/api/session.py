"""The API's session routes: messages in, messages out, the owner's status.

Bodies are validated as `messages import` validates its lines (sizes, no
future dates), with the doors' own rules (`backthink.api.incoming`), plus the
chat app's own optional `id`, which makes sending a message twice harmless.
Reading the session counts as a client being there (`api.seen_window`): the
session channel stays connected for a while. A page is bounded in messages
and in characters, and is sent as the client reads it (`backthink.api.pages`):
in memory it holds one batch, however large the page and whether or not it
is read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from backthink.api.access import Access
from backthink.api.bodies import number_param, only_params, read_json
from backthink.api.incoming import incoming
from backthink.api.pages import Page
from backthink.api.refusals import Refusal
from backthink.config import Settings
from backthink.host.fleet import Fleet
from backthink.host.live import Live, LiveStatus
from backthink.host.status import ModelProbe, owner_status
from backthink.models import Message, SessionEntry

PAGE_DEFAULT = 50  # messages a page holds when the request does not say
PAGE_MAX = 1000  # messages a page holds at most
PAGE_PARAMS = frozenset({"after", "limit", "all"})  # what GET /v1/messages reads of its query
POST_MAX = 1000  # messages one POST may carry
CLIENT_ID_CHARS = 200  # characters of a chat app's message id, at most

RelayUsage = Callable[[str], dict[str, int]]
"""The owner's requests and tokens through the relay, shown in the status."""


class SessionRoutes:
    """`/v1/messages` and `/v1/status` over the fleet's owners."""

    def __init__(
        self,
        fleet: Fleet,
        access: Access,
        *,
        live: Live,
        max_body_bytes: int,
        relay_usage: RelayUsage | None = None,
    ) -> None:
        """Serve every owner of `fleet`; `live` answers what only the daemon knows."""
        self._fleet = fleet
        self._access = access
        self._live = live
        self._limit = max_body_bytes
        self._session = fleet.session
        self._relay_usage = relay_usage
        self._probe = ModelProbe(fleet.clock)

    async def post_messages(self, request: Request) -> Response:
        """POST /v1/messages: store one message or a list; answer them as stored."""
        owner_id = await self._access.owner(request)
        data = await read_json(request, self._limit)
        single = isinstance(data, dict)
        items = [data] if single else data
        if not isinstance(items, list):
            raise Refusal(400, "body: expected a message object or a list of them")
        if len(items) > POST_MAX:
            raise Refusal(400, f"body: more than {POST_MAX} messages in one request")
        app = await self._fleet.app(owner_id)
        now = app.clock.now()
        messages = [
            _message(item, "body" if single else f"body[{i}]", owner_id, app.settings, now)
            for i, item in enumerate(items)
        ]
        stored = await self._session.append(messages)
        if any(m.role == "user" for m in messages):
            self._fleet.turns.spoke(owner_id)  # a round under way yields to the owner
        return JSONResponse({"messages": [_plain(m) for m in stored]})

    async def get_messages(self, request: Request) -> Response:
        """GET /v1/messages[?after=ID][&limit=N][&all=1]: the session, oldest first.

        `all=1` also lists the turns an edit in a chat app left behind, marked superseded.
        """
        owner_id = await self._access.owner(request)
        query = request.query_params
        only_params(query, PAGE_PARAMS)
        limit = number_param(
            query.get("limit"), "limit", default=PAGE_DEFAULT, low=0, high=PAGE_MAX
        )
        after = number_param(query.get("after"), "after", default=None, low=0)
        assert limit is not None
        every = number_param(query.get("all"), "all", default=0, low=0, high=1) == 1
        page = await Page.open(self._session, owner_id, after=after, limit=limit, every=every)
        if page is None:
            raise Refusal(404, f"after: there is no message {after} in this session")
        audience = self._fleet.audience
        if audience is not None:
            audience.seen(owner_id, self._fleet.clock.now())
        # Sent as the client takes it: an unread page holds one batch, never the page.
        return StreamingResponse(page.body(), media_type="application/json")

    async def status(self, request: Request) -> Response:
        """GET /v1/status: the owner's `status --json` object."""
        owner_id = await self._access.owner(request)
        app = await self._fleet.app(owner_id)
        found = await owner_status(
            app.settings,
            owner_id,
            at=app.clock.now(),
            rounds=app.rounds,
            outbox=app.outbox,
            marks=app.marks,
            live=self._live(owner_id) if self._live is not None else LiveStatus(),
            model=await self._probe.health(app.settings.model, app.model),
        )
        answer = found.to_json()
        if self._relay_usage is not None:
            answer["relay"] = self._relay_usage(owner_id)
        return JSONResponse(answer)


def _message(item: Any, where: str, owner_id: str, settings: Settings, now: datetime) -> Message:
    """One message of a POST body, validated as an import line is, with its client id."""
    if not isinstance(item, dict):
        raise Refusal(400, f"{where}: expected a JSON object")
    fields = dict(item)
    client_id = fields.pop("id", None)
    if client_id is not None:
        if isinstance(client_id, int) and not isinstance(client_id, bool):
            client_id = str(client_id)
        if not isinstance(client_id, str) or not 0 < len(client_id) <= CLIENT_ID_CHARS:
            raise Refusal(
                400, f"{where}.id: a string of 1 to {CLIENT_ID_CHARS} characters, or left out"
            )
    message = incoming(fields, where=where, owner_id=owner_id, settings=settings, now=now)
    return message.model_copy(update={"client_id": client_id}) if client_id else message


def _plain(message: Message) -> dict[str, Any]:
    """A stored message as the API shows it."""
    return SessionEntry(message).to_json()
