"""The webhook channel: one signed JSON POST per message.

Every delivery is one ``POST`` to the configured URL with this body, encoded as
compact UTF-8 JSON (no spaces, non-ASCII characters kept as they are)::

    {"round_id":"…","owner_id":"…","persona":{"id":"…","name":"…"},
     "text":"…","urgency":"routine","created_at":"2026-11-30T08:00:00+00:00"}

and these headers:

- ``Content-Type: application/json``
- ``Idempotency-Key: <round_id>``: the same on every attempt of one delivery,
  including attempts resumed after a restart; a receiver that has seen the key
  should answer 2xx and drop the duplicate.
- ``User-Agent: backthink/<version>``
- ``X-Backthink-Signature: sha256=<hex>``, only when ``secret`` is set: the
  lowercase hex HMAC-SHA256 of the exact body bytes, keyed with the secret's
  UTF-8 bytes. Verify it over the raw body before parsing it, with a
  constant-time comparison, e.g. in Python::

      from backthink.delivery.channels.webhook import verify
      if not verify(raw_body, secret, headers["X-Backthink-Signature"]):
          return 401

  or by hand: ``"sha256=" + hmac.new(secret.encode(), raw_body, "sha256").hexdigest()``
  compared with ``hmac.compare_digest``. The signature covers the body only;
  ``round_id`` and ``created_at`` inside it let a receiver drop replays.

A user name and password in the URL (``https://user:pass@host/hook``) are sent
as HTTP Basic authorization, never as part of the request line. Redirects are
not followed: a 3xx answer means the URL is wrong and fails the delivery.

Answers: any 2xx is delivered. 408, 425, 429, any 5xx, timeouts and network
errors fail with a retryable error; any other status fails for good. Each
attempt, from connecting to the last byte of the status and headers, ends
within the channel's ``timeout_s``: a receiver that dribbles its answer a
byte at a time is cut off there, as one that never answers is.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import http.client
import importlib.metadata
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request

from backthink.config import WebhookChannelSettings
from backthink.delivery.channels.deadline import Deadline, deadline_opener
from backthink.errors import ConfigError, DeliveryError
from backthink.records import OutgoingMessage

SIGNATURE_HEADER = "X-Backthink-Signature"
SIGNATURE_PREFIX = "sha256="


def _version() -> str:
    # The installed distribution's metadata, not `backthink.__version__`: an
    # editable install may load `backthink` as a namespace package, whose
    # `__init__` (and so `__version__`) never runs.
    try:
        return importlib.metadata.version("backthink")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


USER_AGENT = f"backthink/{_version()}"
RETRYABLE_STATUSES = frozenset({408, 425, 429})  # plus every 5xx
THREAD_GRACE_S = 1.0  # seconds past timeout_s the sending thread has to notice its deadline


def sign(body: bytes, secret: str) -> str:
    """Return the signature header value for a body: ``sha256=<hex HMAC-SHA256>``.

    Args:
        body: the exact body bytes as sent.
        secret: the shared secret; its UTF-8 bytes are the HMAC key.

    Returns:
        The value of the ``X-Backthink-Signature`` header.
    """
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify(body: bytes, secret: str, header: str) -> bool:
    """Check a signature header against a body, in constant time.

    Args:
        body: the raw body bytes as received, before any parsing.
        secret: the shared secret.
        header: the received ``X-Backthink-Signature`` value.

    Returns:
        True only when the header is exactly the signature of `body` with `secret`.
    """
    expected = sign(body, secret).encode("ascii")
    # Bytes, not str: compare_digest refuses non-ASCII str, and a forged
    # header may hold anything.
    received = header.strip().encode("utf-8", errors="replace")
    return hmac.compare_digest(expected, received)


def encode_body(message: OutgoingMessage) -> bytes:
    """Serialize a message once, exactly as it is sent and signed.

    Args:
        message: the message of one round.

    Returns:
        Compact UTF-8 JSON of `message.webhook_body()`.
    """
    document = message.webhook_body()
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class WebhookChannel:
    """POSTs each message as signed JSON to one URL.

    Attributes:
        name: the channel's name in the configuration.
        target: ``scheme://host:port`` of the URL, safe to show anywhere.
    """

    def __init__(self, name: str, settings: WebhookChannelSettings) -> None:
        """Create the channel.

        Args:
            name: the channel's name in the configuration.
            settings: the URL, optional secret and timeout.

        Raises:
            ConfigError: the URL's port is not a number, or the secret is empty.
        """
        self.name = name
        parts = urllib.parse.urlsplit(settings.url)
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(f"channels.{name}.url: the port is not a number") from None
        host = parts.hostname or ""
        shown_host = f"[{host}]" if ":" in host else host
        default_port = 443 if parts.scheme == "https" else 80
        # Safe to show in errors and logs: the path is left out as well as the
        # query and credentials, because services such as Discord put their
        # token in the path.
        self.target = f"{parts.scheme}://{shown_host}:{port or default_port}"
        netloc = parts.netloc.rpartition("@")[2]
        self._url = urllib.parse.urlunsplit(
            (parts.scheme, netloc, parts.path or "/", parts.query, "")
        )
        self._authorization = _basic_auth(parts)
        secret = settings.secret.get_secret_value() if settings.secret is not None else None
        if secret == "":
            # An empty HMAC key signs nothing a stranger could not sign too.
            raise ConfigError(f"channels.{name}.secret: must not be empty")
        self._secret = secret
        self._timeout_s = settings.timeout_s

    @property
    def connected(self) -> bool:
        """Always True: whether the receiver is up is only known by trying."""
        return True

    def headers_for(self, message: OutgoingMessage, body: bytes) -> dict[str, str]:
        """The headers of one POST, including the signature when a secret is set.

        Args:
            message: the message being sent.
            body: its encoded body, as returned by `encode_body`.

        Returns:
            Header names and values.
        """
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": message.round_id,
            "User-Agent": USER_AGENT,
        }
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign(body, self._secret)
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        return headers

    async def send(self, message: OutgoingMessage) -> None:
        """POST one message and map the answer to success or a DeliveryError.

        Args:
            message: the message of one round; its round id is the idempotency key.

        Raises:
            DeliveryError: the receiver refused or could not be reached; the
                detail is one short line without the URL's path, the secret or
                the message.
        """
        body = encode_body(message)
        deadline = Deadline()
        # The event loop keeps the attempt's deadline, which ends the thread's work
        # by shutting its sockets; the timeout below frees the delivery even where
        # nothing can interrupt the thread (a host name lookup).
        expiry = asyncio.get_running_loop().call_later(self._timeout_s, deadline.expire)
        try:
            async with asyncio.timeout(self._timeout_s + THREAD_GRACE_S):
                await asyncio.to_thread(self._post, body, self.headers_for(message, body), deadline)
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            expiry.cancel()

    def _timed_out(self) -> DeliveryError:
        return network_error(
            self.name, TimeoutError(), timeout_s=self._timeout_s, target=self.target
        )

    def _post(self, body: bytes, headers: dict[str, str], deadline: Deadline) -> None:
        request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")
        try:
            self._exchange(deadline_opener(deadline), request)
        except DeliveryError:
            if deadline.expired:
                # The sockets were shut under the read: what broke was the deadline.
                raise self._timed_out() from None
            raise

    def _exchange(
        self, opener: urllib.request.OpenerDirector, request: urllib.request.Request
    ) -> None:
        try:
            with opener.open(request, timeout=self._timeout_s):
                # Any 2xx: the answer's body carries nothing we need.
                return
        except urllib.error.HTTPError as error:
            # The error holds the open response; close it now rather than
            # leaving the socket to the garbage collector.
            with contextlib.closing(error):
                status = error.code
            # `from None`: the chained error carries the full URL.
            raise _status_error(self.name, status) from None
        except (OSError, http.client.HTTPException) as error:
            raise network_error(
                self.name, error, timeout_s=self._timeout_s, target=self.target
            ) from None


def _basic_auth(parts: urllib.parse.SplitResult) -> str | None:
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def _status_error(channel: str, status: int) -> DeliveryError:
    if 300 <= status < 400:
        return DeliveryError(channel, f"HTTP {status}: redirects are not followed", retryable=False)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return DeliveryError(channel, f"HTTP {status}", retryable=retryable)


def network_error(
    channel: str, error: BaseException, *, timeout_s: float, target: str = ""
) -> DeliveryError:
    """Map a failure to reach the receiver to a short, retryable DeliveryError.

    Args:
        channel: the channel name.
        error: what urllib or the socket raised.
        timeout_s: the configured timeout, for the message.
        target: ``scheme://host:port`` to name in the detail, or "".

    Returns:
        A retryable DeliveryError whose detail is one line naming the cause.
    """
    cause: BaseException = error
    # urllib wraps connection failures in URLError(reason=<the OSError>).
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        cause = error.reason
    suffix = f" ({target})" if target else ""
    detail: str
    if isinstance(cause, TimeoutError):
        detail = f"timed out after {timeout_s:g}s"
    elif isinstance(cause, ConnectionRefusedError):
        detail = "connection refused"
    elif isinstance(cause, http.client.RemoteDisconnected):
        detail = "connection closed without an answer"
    elif isinstance(cause, ConnectionResetError):
        detail = "connection reset"
    elif isinstance(cause, ConnectionError):
        detail = "connection lost"
    elif isinstance(cause, socket.gaierror):
        detail = "could not resolve the host name"
    elif isinstance(cause, ssl.SSLCertVerificationError):
        detail = "TLS certificate not trusted"
    elif isinstance(cause, ssl.SSLError):
        detail = "TLS error"
    elif isinstance(cause, http.client.HTTPException):
        detail = "invalid HTTP answer"
    else:
        # Only the type: an exception's text may quote the URL.
        detail = f"network error ({type(cause).__name__})"
    return DeliveryError(channel, detail + suffix, retryable=True)
