"""A webhook's HTTP transport: one httpx2 client per channel, each POST under one deadline.

The whole attempt (connecting, TLS, sending, the status line and the headers)
runs under `asyncio.timeout(timeout_s)`. A read timeout bounds each read, not
the attempt: a receiver that sends a byte every 50 ms would never trip one.
The event loop keeps the deadline, on its monotonic clock, so no thread waits
on a timer and a moved system clock moves no deadline. What the receiver sends
is bounded too: the answer's body is never read, and the status line and
headers are refused past the HTTP parser's 100 KiB. Redirects are not
followed, and no connection is kept between attempts.

httpx2 is imported by this module only, and this module only when a webhook
first sends: a process that builds its channels and never sends (a `status`,
the idle daemon) does not load the HTTP client.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator, Mapping

import httpx2

from backthink.errors import DeliveryError

MAX_CAUSES = 16  # links of an error's `__cause__` chain read for its cause, at most
HTTP_CLIENT_MODULES = frozenset({"httpx2", "httpcore2"})  # httpx2 and the transport it drives


class WebhookTransport:
    """POSTs to one URL on a client the channel's attempts share.

    One client for every attempt: the TLS context (the system's trust store) is
    loaded once, not per attempt. No connection is kept between attempts
    (messages come minutes apart, a kept one would be stale by the next), so
    the client holds no socket between them and needs no closing.
    """

    def __init__(
        self,
        channel: str,
        url: str,
        *,
        auth: tuple[str, str] | None,
        timeout_s: float,
        target: str,
    ) -> None:
        """Create the transport and its client.

        Args:
            channel: the channel's name, for errors.
            url: the URL to POST to, without credentials.
            auth: user and password for HTTP Basic authorization, or None.
            timeout_s: seconds each attempt may take, from connecting to the
                last byte of the headers.
            target: ``scheme://host:port`` of the URL, the only part errors show.
        """
        self._channel = channel
        self._url = url
        self._timeout_s = timeout_s
        self._target = target
        self._client = httpx2.AsyncClient(
            auth=httpx2.BasicAuth(*auth) if auth is not None else None,
            follow_redirects=False,
            limits=httpx2.Limits(max_keepalive_connections=0),
            # The attempt's deadline below bounds every step; a second set of
            # per-step timeouts would only add ways to say the same thing.
            timeout=None,
        )

    async def post(self, body: bytes, headers: Mapping[str, str]) -> int:
        """POST `body` once and return the answer's status, its body unread.

        Raises:
            DeliveryError: retryable, when the receiver could not be reached or
                did not answer within the deadline; for good, when the URL is
                one the HTTP client cannot send to.
        """
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                self._client.stream("POST", self._url, content=body, headers=headers) as answer,
            ):
                # Closing the answer unread closes its connection: a receiver
                # answering with a body of any size costs one read at most.
                return answer.status_code
        except httpx2.InvalidURL:
            raise DeliveryError(
                self._channel, "the URL cannot be sent to", retryable=False
            ) from None
        except (TimeoutError, httpx2.RequestError, OSError) as error:
            # `from None`: the chained errors carry the full URL.
            raise network_error(
                self._channel, error, timeout_s=self._timeout_s, target=self._target
            ) from None


_KNOWN_CAUSES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (ConnectionResetError, "connection reset"),
    (ConnectionError, "connection lost"),
    (socket.gaierror, "could not resolve the host name"),
    (ssl.SSLCertVerificationError, "TLS certificate not trusted"),
    (ssl.SSLError, "TLS error"),
)
"""A cause found in an error's chain, and the words for it; the first that matches wins."""


def network_error(
    channel: str, error: BaseException, *, timeout_s: float, target: str = ""
) -> DeliveryError:
    """Map a failure to reach the receiver to a short, retryable DeliveryError.

    httpx2 raises its own error over the socket's (a refused connection is a
    ConnectError over an OSError over the ConnectionRefusedError), so the cause
    is looked for down the chain of errors under it.

    Args:
        channel: the channel name.
        error: what the deadline, httpx2 or the socket raised.
        timeout_s: the configured timeout, for the message.
        target: ``scheme://host:port`` to name in the detail, or "".

    Returns:
        A retryable DeliveryError whose detail is one line naming the cause.
    """
    chain = list(_causes(error))
    suffix = f" ({target})" if target else ""
    return DeliveryError(channel, _detail(chain, timeout_s) + suffix, retryable=True)


def _detail(chain: list[BaseException], timeout_s: float) -> str:
    if any(isinstance(e, TimeoutError | httpx2.TimeoutException) for e in chain):
        return f"timed out after {timeout_s:g}s"
    for kinds, words in _KNOWN_CAUSES:
        if any(isinstance(e, kinds) for e in chain):
            return words
    innermost = chain[-1]
    if isinstance(chain[0], httpx2.RemoteProtocolError) and _own(innermost):
        # The client's own verdict, with no parser error under it: the receiver
        # closed the connection before its status line and headers were complete.
        return "connection closed without an answer"
    if any(isinstance(e, httpx2.ProtocolError | httpx2.DecodingError) for e in chain):
        return "invalid HTTP answer"
    # Only the type: an exception's text may quote the URL.
    return f"network error ({type(innermost).__name__})"


def _own(error: BaseException) -> bool:
    """Whether httpx2 or the transport under it raised `error` itself, from no other error."""
    return type(error).__module__.partition(".")[0] in HTTP_CLIENT_MODULES


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors under it (raised from or while handling), outermost first.

    A group stands by its first error: anyio groups the failures of each address
    of a host, which are alike.
    """
    current: BaseException | None = error
    for _ in range(MAX_CAUSES):
        if current is None:
            return
        yield current
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
        else:
            # The context too, even where `from None` hid it: httpcore2's pool
            # re-raises its ConnectError so, leaving the OSError only there.
            current = current.__cause__ or current.__context__
