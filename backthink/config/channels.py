"""The channel sections: the main session itself, a webhook, or any apprise URL."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from backthink.config.sections import _Section
from backthink.redact import redact_url


class WebChannelSettings(_Section):
    """The main session itself: the message waits there for the web UI."""

    type: Literal["web"] = "web"


class WebhookChannelSettings(_Section):
    """A JSON POST to a URL, signed with HMAC-SHA256 when a secret is set."""

    type: Literal["webhook"]
    url: str
    secret: SecretStr | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{redact_url(value)!r} is not an http(s) URL")
        return value


class AppriseChannelSettings(_Section):
    """Any apprise URL (tgram://, discord://, ntfy://, mailto://, ...); it holds tokens."""

    type: Literal["apprise"]
    url: SecretStr


ChannelSettings = Annotated[
    WebChannelSettings | WebhookChannelSettings | AppriseChannelSettings,
    Field(discriminator="type"),
]


def _default_channels() -> dict[str, ChannelSettings]:
    return {"web": WebChannelSettings()}
