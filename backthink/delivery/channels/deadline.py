"""One HTTP attempt bounded as a whole: its sockets are shut down when its time is up.

Socket timeouts bound each read, so a receiver that sends a byte now and then
would hold an attempt (and the thread, and the owner's delivery) for ever. A
`Deadline` shuts the attempt's sockets down when its caller says the time is
up; the blocked read returns at once and the attempt fails as timed out. `deadline_opener` gives a
urllib opener whose connections the deadline watches and which follows no
redirect.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.request
from collections.abc import Callable
from typing import IO, Any


def deadline_opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """An opener whose HTTP and HTTPS sockets `deadline` watches, following no redirect."""
    return urllib.request.build_opener(
        _NoRedirects(), _WatchedHTTP(deadline), _WatchedHTTPS(deadline)
    )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirected POST would either lose its body (301/302/303 turn into GET)
    # or carry the signed message to a host nobody configured; the 3xx answer
    # is reported as a failure instead.
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class Deadline:
    """The sockets of one attempt, shut down when `expire` is called.

    The caller keeps the time (the event loop's `call_later`): a timer thread's
    timed wait reads a clock of its own, which a moved system clock can stall.
    """

    def __init__(self) -> None:
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    def watch(self, sock: socket.socket) -> socket.socket:
        """Shut `sock` down at the deadline (at once if it already passed)."""
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)
        return sock

    def expire(self) -> None:
        """The time is up: shut every watched socket down, and any watched from now on."""
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, even for a TLS socket: it acts on the descriptor and
    # leaves the TLS object, which another thread is reading with, alone.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watched(base: type[http.client.HTTPConnection], deadline: Deadline) -> Any:
    """A connection class like `base` whose socket `deadline` shuts down when it passes."""

    class Watched(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            create: Callable[..., socket.socket] = self._create_connection  # type: ignore[has-type]

            def watched(*args: Any, **kwargs: Any) -> socket.socket:
                # Watched from its creation, so a TLS handshake is bounded too.
                return deadline.watch(create(*args, **kwargs))

            self._create_connection = watched

    return Watched


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self._deadline), req, **kwargs)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self._deadline), req, **kwargs)
