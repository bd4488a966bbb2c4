"""The webhook channel: one signed JSON POST per message.

Every delivery is one ``POST`` to the configured URL with this body, encoded as
compact UTF-8 JSON (no spaces, non-ASCII characters kept as they are)::

    {"round_id":"…","owner_id":"…","persona":{"id":"…","name":"…"},
     "text":"…","content":"…","urgency":"routine","created_at":"2026-11-30T08:00:00+00:00"}

(`content` repeats `text` under the name a chat app's incoming webhook reads,
such as an Open WebUI Channel's: its URL works as the channel's `url`.)

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
byte at a time is cut off there, as one that never answers is. The answer's
body is never read (see `backthink.delivery.channels.transport`).
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import urllib.parse
from typing import TYPE_CHECKING

from backthink.config import WebhookChannelSettings
from backthink.errors import ConfigError, DeliveryError
from backthink.records import OutgoingMessage

if TYPE_CHECKING:
    from backthink.delivery.channels.transport import WebhookTransport

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
        self._auth = _credentials(parts)
        secret = settings.secret.get_secret_value() if settings.secret is not None else None
        if secret == "":
            # An empty HMAC key signs nothing a stranger could not sign too.
            raise ConfigError(f"channels.{name}.secret: must not be empty")
        self._secret = secret
        self._timeout_s = settings.timeout_s
        self._transport: WebhookTransport | None = None

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
        status = await self._http().post(body, self.headers_for(message, body))
        if not 200 <= status < 300:
            raise _status_error(self.name, status)

    def _http(self) -> WebhookTransport:
        """The channel's transport, made at its first send.

        A process that builds its channels and never sends (a `status`, the
        idle daemon) loads no HTTP client and no TLS trust store.
        """
        if self._transport is None:
            from backthink.delivery.channels.transport import WebhookTransport

            self._transport = WebhookTransport(
                self.name, self._url, auth=self._auth, timeout_s=self._timeout_s, target=self.target
            )
        return self._transport


def _credentials(parts: urllib.parse.SplitResult) -> tuple[str, str] | None:
    """The URL's user and password, percent-decoded, or None when it names no user."""
    if parts.username is None:
        return None
    return urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")


def _status_error(channel: str, status: int) -> DeliveryError:
    if 300 <= status < 400:
        return DeliveryError(channel, f"HTTP {status}: redirects are not followed", retryable=False)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return DeliveryError(channel, f"HTTP {status}", retryable=retryable)
