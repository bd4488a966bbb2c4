"""Delivery channels that send: a signed JSON webhook, and any apprise URL.

The main session itself (a channel of type web) has no sender: the write-back
of the message is its delivery (see `backthink.delivery.dispatcher`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from backthink.config import (
    AppriseChannelSettings,
    ChannelSettings,
    WebChannelSettings,
    WebhookChannelSettings,
)
from backthink.delivery.channels.apprise import AppriseChannel
from backthink.delivery.channels.webhook import WebhookChannel, sign, verify
from backthink.ports import Channel

SenderSettings = WebhookChannelSettings | AppriseChannelSettings

__all__ = [
    "AppriseChannel",
    "WebhookChannel",
    "build_channel",
    "build_channels",
    "sign",
    "verify",
]


def build_channel(name: str, settings: SenderSettings) -> Channel:
    """Build one sending channel from its settings.

    Args:
        name: the channel's name in the configuration.
        settings: its `[channels.<name>]` section.

    Returns:
        The channel, ready to send.

    Raises:
        ConfigError: the settings cannot work (e.g. a URL apprise does not understand).
    """
    if isinstance(settings, WebhookChannelSettings):
        return WebhookChannel(name, settings)
    if isinstance(settings, AppriseChannelSettings):
        return AppriseChannel(name, settings)
    assert_never(settings)


def build_channels(channels: Mapping[str, ChannelSettings]) -> dict[str, Channel]:
    """Build every configured channel that sends (all but type web), in configuration order.

    Args:
        channels: `Settings.channels`, name to settings.

    Returns:
        Name to channel, in the same order as `channels`.

    Raises:
        ConfigError: one channel's settings cannot work; the message names its key.
    """
    return {
        name: build_channel(name, settings)
        for name, settings in channels.items()
        if not isinstance(settings, WebChannelSettings)
    }
