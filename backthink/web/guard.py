"""Who may use the page: loopback by default, a token for anything else, same-origin POSTs.

Without `web.token` the page serves only requests addressed to a loopback
name or the configured host (so a web site that rebinds its own name to
127.0.0.1 gets nothing). With a token, every request carries it, either as
`Authorization: Bearer TOKEN` (scripts) or as the `backthink_token` cookie
that visiting `/?token=TOKEN` once sets (browsers; the cookie holds a value
derived from the token, not the token itself, and is HttpOnly and
SameSite=Strict). Tokens are compared in constant time.

A POST (pause, resume, forget) from a browser must also come from the page
itself: its Origin header, or else its Referer, names this very host. Other
sites' forms are refused even on loopback. A request authorised by its
Authorization header is a script's, which no other site can forge.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from backthink.config import LOOPBACK_HOSTS, WebSettings
from backthink.host.origin import same_origin
from backthink.web.pages import message_page

COOKIE = "backthink_token"
COOKIE_MAX_AGE_S = 400 * 24 * 3600  # seconds; the most a browser keeps a cookie anyway
_COOKIE_CONTEXT = b"backthink page cookie"


class Guard:
    """Checks one request against the page's access rules."""

    def __init__(self, web: WebSettings) -> None:
        """Take the token and the listen address from the settings."""
        self._token = web.secret
        self._cookie = (
            hmac.new(self._token.encode(), _COOKIE_CONTEXT, hashlib.sha256).hexdigest()
            if self._token is not None
            else None
        )
        address = web.address
        self._hosts = LOOPBACK_HOSTS | ({address[0]} if address else set())

    def check(self, request: Request) -> Response | None:
        """None when the request may go on, else the refusal to send instead."""
        by_header = False
        if self._token is None:
            if request.url.hostname not in self._hosts:
                return _refuse("Unknown host", "This page answers only on its own address.", 403)
        else:
            login = request.query_params.get("token")
            if login is not None and request.method == "GET":
                return self._login(request, login)
            by_header = self._bearer_ok(request)
            if not by_header and not self._cookie_ok(request):
                return _refuse(
                    "Token required",
                    "Open this page once as /?token=YOUR_TOKEN (web.token in the config), "
                    "or send Authorization: Bearer YOUR_TOKEN.",
                    401,
                )
        if request.method == "POST" and not by_header and not same_origin(request):
            return _refuse("Refused", "A change must come from this page itself.", 403)
        return None

    def _login(self, request: Request, given: str) -> Response:
        if not self._matches(given):
            return _refuse("Wrong token", "That token does not open this page.", 401)
        # Redirected, so the token leaves the address bar and the history.
        response = RedirectResponse(request.url.path, status_code=303)
        assert self._cookie is not None
        response.set_cookie(
            COOKIE, self._cookie, max_age=COOKIE_MAX_AGE_S, httponly=True, samesite="strict"
        )
        return response

    def _matches(self, given: str) -> bool:
        assert self._token is not None
        return hmac.compare_digest(given.encode(), self._token.encode())

    def _bearer_ok(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self._matches(given.strip())

    def _cookie_ok(self, request: Request) -> bool:
        given = request.cookies.get(COOKIE)
        assert self._cookie is not None
        return given is not None and hmac.compare_digest(given.encode(), self._cookie.encode())


def _refuse(title: str, text: str, status: int) -> Response:
    return HTMLResponse(message_page(title, text, status=status), status_code=status)
