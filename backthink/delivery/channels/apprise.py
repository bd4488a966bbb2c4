"""The apprise channel: any apprise URL (tgram://, discord://, ntfy://, mailto://, json://, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from backthink.config import AppriseChannelSettings
from backthink.delivery.channels.priority import url_for
from backthink.errors import ConfigError, DeliveryError
from backthink.models import Urgency
from backthink.records import OutgoingMessage

if TYPE_CHECKING:
    import apprise

# Loggers that would carry apprise URLs. apprise logs the URL it could not
# parse verbatim, tokens included, at ERROR; at DEBUG it logs loaded URLs with
# their query (where many services keep a token), the payload (the message
# text, which is private) and requests' exception text with the full URL.
# requests, which apprise uses, logs every request line with its path and
# query through urllib3 at DEBUG, and Telegram keeps its bot token in the path.
_APPRISE_LOGGER = "apprise"
_URLLIB3_LOGGER = "urllib3"
DEFAULT_TITLE = "backthink"  # the title of a persona without a name


def _load_apprise() -> ModuleType:
    """Import apprise and keep its logs to itself; only done when a channel is built."""
    # Nothing apprise logs may reach our output, whatever the process's logging
    # setup: no record below CRITICAL is even created, records never propagate
    # to the root logger's handlers, and the NullHandler keeps Python's
    # last-resort stderr handler away. Our own DeliveryError says what failed.
    quiet = logging.getLogger(_APPRISE_LOGGER)
    quiet.setLevel(logging.CRITICAL)
    quiet.propagate = False
    if not any(isinstance(handler, logging.NullHandler) for handler in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    # requests (and so urllib3) is used only by apprise in this process, so
    # raising its threshold hides nothing else; its warnings can quote URLs too.
    logging.getLogger(_URLLIB3_LOGGER).setLevel(logging.ERROR)
    # Imported here, not at the top: apprise is slow to import, and a daemon
    # without an apprise channel should not pay for it. Imported after the
    # loggers are set, because apprise already logs while it is imported.
    with _apprise_import_warnings_ignored():
        return importlib.import_module("apprise")


@contextlib.contextmanager
def _apprise_import_warnings_ignored() -> Iterator[None]:
    # apprise imports its ~190 plugins on first use, and some import modules
    # that Python deprecates (its e-mail plugin imports `imghdr` on 3.11).
    # Those warnings are apprise's to fix; they would only alarm a user, and
    # tests turn warnings into errors. It wraps only the building of a channel,
    # once at startup, because catch_warnings changes process-wide state.
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, SyntaxWarning):
            warnings.simplefilter("ignore", category)
        yield


class AppriseChannel:
    """Sends each message through one apprise URL.

    Attributes:
        name: the channel's name in the configuration.
    """

    def __init__(self, name: str, settings: AppriseChannelSettings) -> None:
        """Create the channel and check that apprise understands its URL.

        Args:
            name: the channel's name in the configuration.
            settings: the apprise URL (a secret: it holds tokens).

        Raises:
            ConfigError: apprise cannot parse the URL or does not know its scheme.
        """
        self.name = name
        module = _load_apprise()
        # The model's words go out as plain text: no service reads them as HTML or
        # Markdown (escaped where a service needs it), and no code becomes an emoji.
        asset = module.AppriseAsset(body_format=module.NotifyFormat.TEXT, interpret_emojis=False)
        client: apprise.Apprise = module.Apprise(asset=asset)
        url = settings.url.get_secret_value()
        with _apprise_import_warnings_ignored():
            # One registration per urgency, each with the service's priority for it.
            understood = all(
                client.add(url_for(url, urgency), tag=urgency.value) for urgency in Urgency
            )
        if not understood:
            # Never echo the URL: it holds the service's tokens.
            raise ConfigError(f"channels.{name}.url: apprise does not understand this URL")
        self._client = client
        self._types = {
            Urgency.ROUTINE: module.NotifyType.INFO,
            Urgency.WARNING: module.NotifyType.WARNING,
            Urgency.CRITICAL: module.NotifyType.FAILURE,
        }
        self._text = module.NotifyFormat.TEXT
        # One notify at a time per channel: apprise plugins keep throttling
        # state per URL, and a chat app gets messages in the order they were sent.
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        """Always True: whether the service is up is only known by trying."""
        return True

    async def send(self, message: OutgoingMessage) -> None:
        """Send the message as plain text at its urgency, titled with the persona's name.

        A persona without a name is titled "backthink".

        Args:
            message: the message of one round.

        Raises:
            DeliveryError: apprise reported a failure (always retryable; apprise
                does not say whether trying again may help).
        """
        async with self._lock:
            try:
                title = message.persona_name or DEFAULT_TITLE
                delivered = await asyncio.to_thread(
                    self._notify, message.text, title, message.urgency
                )
            except Exception as error:
                # Plugins are third-party code. Only the type is kept, and the
                # chain is cut, because their exception text may quote the URL.
                raise DeliveryError(
                    self.name, f"apprise could not deliver ({type(error).__name__})"
                ) from None
        if not delivered:
            raise DeliveryError(self.name, "apprise could not deliver", retryable=True)

    def _notify(self, text: str, title: str, urgency: Urgency) -> bool:
        # apprise 1.x returns a bool, 2.x an AppriseResult whose truth is success.
        return bool(
            self._client.notify(
                body=text,
                title=title,
                notify_type=self._types[urgency],
                body_format=self._text,
                tag=urgency.value,
            )
        )
