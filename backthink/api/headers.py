"""What a chat front-end says of a turn in its headers: its chat, its message, the reply it follows.

`X-Backthink-Chat` (or Open WebUI's own `X-OpenWebUI-Chat-Id`) names the
chat; `X-Backthink-Message` the turn's user message; `X-Backthink-Parent`
the reply it follows, empty on a chat's first message. Open WebUI fills
them from its per-connection header templates (docs/api.md). A value that is
empty or longer than `ID_CHARS` names nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from backthink.api.turns import Ids

CHAT_HEADERS = ("x-backthink-chat", "x-openwebui-chat-id")
MESSAGE_HEADER = "x-backthink-message"
PARENT_HEADER = "x-backthink-parent"
ID_CHARS = 200  # characters of a front-end's id, at most (as a message's client id)


def ids_of(headers: Mapping[str, str]) -> Ids:
    """The chat and message ids a request's headers carry (header names in lower case)."""
    chat = next((v for v in (_id(headers.get(h)) for h in CHAT_HEADERS) if v), None)
    parent = headers.get(PARENT_HEADER)
    if parent is not None:
        parent = parent.strip()
        parent = parent if len(parent) <= ID_CHARS else None
    return Ids(chat, _id(headers.get(MESSAGE_HEADER)), parent)


def _id(value: str | None) -> str | None:
    """A header's id, or None when it is missing, empty or too long."""
    if value is None:
        return None
    value = value.strip()
    return value if 0 < len(value) <= ID_CHARS else None
