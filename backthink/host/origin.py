"""Which site a browser's request comes from, as the page and the API both check it.

Browsers name the page behind a request: `Origin` on every POST and every
cross-origin fetch, `Referer` on most others, and `Sec-Fetch-Site` on all of
them in current browsers. Scripts and command-line clients send none of
these, and no web site can make a browser leave them out, so a request that
names another site is refused wherever a web site must not reach: the page's
changes, and the API while it is open without tokens.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

# What `Sec-Fetch-Site` says of a request made by this very origin's page, or by the user
# (typed into the address bar, a bookmark).
OWN_FETCH_SITES = frozenset({"same-origin", "none"})


def same_origin(request: Request) -> bool:
    """Whether a browser's request names this host as its origin (Origin, else Referer)."""
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    origin = request.headers.get("origin")
    if origin and origin != "null":
        return hmac.compare_digest(origin.encode(), own.encode())
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}" == own
    return False


def from_another_site(request: Request) -> bool:
    """Whether a browser says the request comes from another site's page (scripts say nothing).

    Another site is any other origin: another host, another port of this
    host, a sandboxed frame (`Origin: null`).
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.strip().lower() not in OWN_FETCH_SITES:
        return True
    named = "origin" in request.headers or "referer" in request.headers
    return named and not same_origin(request)
