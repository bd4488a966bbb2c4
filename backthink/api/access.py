"""Who a request speaks for: the owner its bearer token names, within a rate limit.

Every token belongs to one owner (`backthink owners token ID`); only its
digest is stored, and looking it up is one primary-key read. A token of an
owner that is gone or disabled opens nothing.

On a loopback address, while no token was ever made for any owner, the API
is open like the page: every request speaks for the daemon's first owner,
and only requests addressed to a loopback name or the configured host are
served (a web site that rebinds its own name to 127.0.0.1 gets nothing), and
none that a browser says comes from another site's page (`Origin`,
`Referer`, `Sec-Fetch-Site`): any page the owner visits could otherwise read
the session, or chat through the relay on the upstream's key. The first token
closes that door for good: revoking every token later leaves the API closed
(401) until a new one is made. A non-loopback address without any token is
refused at start.

A request's right is checked when it comes; an event stream is checked
again as it runs (`holds`), so a stream of a revoked token is closed.
"""

from __future__ import annotations

import math
from datetime import datetime

from starlette.requests import Request

from backthink.api.refusals import Refusal
from backthink.config import LOOPBACK_HOSTS, ApiSettings
from backthink.errors import BackthinkError
from backthink.host.fleet import Fleet
from backthink.host.origin import from_another_site

RATE_PER_S = 5.0  # requests an owner's clients may make per second, sustained
BURST = 120  # requests an owner's clients may make at once, after a quiet while
TOKEN_CHARS = 512  # characters of a bearer token read at most; a longer one is no token


class Access:
    """Resolves the owner of each request and keeps each owner within the rate limit."""

    def __init__(self, fleet: Fleet, api: ApiSettings, default_owner: str) -> None:
        """Check requests against the fleet's tokens; `default_owner` serves an open loopback."""
        self._fleet = fleet
        self._tokens = fleet.tokens
        self._default = default_owner
        self._loopback = api.loopback
        address = api.address
        self._hosts = LOOPBACK_HOSTS | ({address[0]} if address else set())
        self._buckets: dict[str, tuple[float, datetime]] = {}

    async def owner(self, request: Request) -> str:
        """The owner the request speaks for.

        Raises:
            Refusal: 401 for a missing or unknown token, 403 for a foreign host
                name or another site's page on an open loopback, 429 past the
                owner's rate limit.
        """
        owner_id = await self._resolve(request)
        self._spend(owner_id, self._fleet.clock.now())
        return owner_id

    async def holds(self, request: Request, owner_id: str) -> bool:
        """Whether the request still speaks for `owner_id` (its token not revoked since).

        Spends nothing of the rate limit: a stream asks this as it runs.

        Raises:
            StoreError: the tokens cannot be read.
        """
        try:
            return await self._resolve(request) == owner_id
        except Refusal:
            return False

    async def _resolve(self, request: Request) -> str:
        """The owner of the request's token, or the default owner of an open loopback API."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        token = given.strip() if scheme.lower() == "bearer" else ""
        if token and len(token) <= TOKEN_CHARS:
            owner_id = await self._tokens.owner_of(token)
            if owner_id is not None:
                try:
                    await self._fleet.owner(owner_id)
                except BackthinkError:
                    raise Refusal(401, "the token's owner is disabled or gone") from None
                return owner_id
        if self._loopback and not await self._tokens.ever():
            if request.url.hostname not in self._hosts:
                raise Refusal(403, "this API answers only on its own address")
            if from_another_site(request):
                raise Refusal(403, "this API answers no other site's page")
            return self._default
        if token:
            raise Refusal(401, "unknown token")
        raise Refusal(
            401, "send Authorization: Bearer TOKEN (make one with `backthink owners token ID`)"
        )

    def _spend(self, owner_id: str, at: datetime) -> None:
        """Take one request from the owner's bucket, or refuse it (429) when it is empty."""
        left, last = self._buckets.get(owner_id, (float(BURST), at))
        elapsed = max(0.0, (at - last).total_seconds())
        left = min(float(BURST), left + elapsed * RATE_PER_S)
        if left < 1.0:
            wait_s = math.ceil((1.0 - left) / RATE_PER_S)
            self._buckets[owner_id] = (left, at)
            raise Refusal(429, "too many requests: slow down", headers={"retry-after": str(wait_s)})
        self._buckets[owner_id] = (left - 1.0, at)
