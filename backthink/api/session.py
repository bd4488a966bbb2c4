"""The API's session routes: messages in, messages out, the owner's status.

Bodies are validated as `messages import` validates its lines (sizes, no
future dates), with the doors' own rules (`backthink.api.incoming`), plus the
chat app's own optional `id`, which makes sending a message twice harmless.
Reading the session counts as a client being there (`api.seen_window`): the
session channel stays connected for a while. A page is bounded in messages
and in characters, so a session of large images is read a part at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from backthink.api.access import Access
from backthink.api.bodies import number_param, read_json
from backthink.api.incoming import incoming
from backthink.api.refusals import Refusal
from backthink.config import ModelSettings, Settings
from backthink.host.fleet import Fleet
from backthink.host.live import Live, LiveStatus
from backthink.host.status import model_health, owner_status
from backthink.models import Message, SessionEntry
from backthink.ports import Clock, ModelClient

PAGE_DEFAULT = 50  # messages a page holds when the request does not say
PAGE_MAX = 1000  # messages a page holds at most
PAGE_MAX_CHARS = 8_000_000  # characters of text and images a page holds (one message at least)
POST_MAX = 1000  # messages one POST may carry
CLIENT_ID_CHARS = 200  # characters of a chat app's message id, at most
PROBE_FOR = timedelta(seconds=30)  # how long /v1/status reuses its answer about the model

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
        self._session = fleet.stores.session
        self._relay_usage = relay_usage
        self._probe = _ModelProbe(fleet.clock)

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
        return JSONResponse({"messages": [_plain(m) for m in stored]})

    async def get_messages(self, request: Request) -> Response:
        """GET /v1/messages[?after=ID][&limit=N][&all=1]: the session, oldest first.

        `all=1` also lists the turns an edit in a chat app left behind, marked superseded.
        """
        owner_id = await self._access.owner(request)
        query = request.query_params
        limit = number_param(
            query.get("limit"), "limit", default=PAGE_DEFAULT, low=0, high=PAGE_MAX
        )
        after = number_param(query.get("after"), "after", default=None, low=0)
        assert limit is not None
        every = number_param(query.get("all"), "all", default=0, low=0, high=1) == 1
        entries = await self._session.page(
            owner_id, after=after, limit=limit, max_chars=PAGE_MAX_CHARS, every=every
        )
        if entries is None:
            raise Refusal(404, f"after: there is no message {after} in this session")
        audience = self._fleet.audience
        if audience is not None:
            audience.seen(owner_id, self._fleet.clock.now())
        return JSONResponse({"messages": [e.to_json() for e in entries]})

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


class _ModelProbe:
    """The model's health, probed at most once per `PROBE_FOR` per endpoint.

    A status request is cheap and clients may poll it; the probe is a call to
    the endpoint, which should not be made for every one of them.
    """

    def __init__(self, clock: Clock) -> None:
        """Time the answers with `clock`."""
        self._clock = clock
        self._known: dict[tuple[str | None, str], tuple[datetime, str]] = {}

    async def health(self, settings: ModelSettings, client: ModelClient | None) -> str:
        """`model_health`'s answer, reused while it is fresh."""
        key = (settings.base_url, settings.name)
        now = self._clock.now()
        known = self._known.get(key)
        if known is not None and now - known[0] < PROBE_FOR:
            return known[1]
        found = await model_health(settings, client=client)
        self._known[key] = (self._clock.now(), found)
        return found
