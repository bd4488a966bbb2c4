"""What a chat request says, and what a session entry is to it: the words turns are matched by.

A request's user and assistant messages are read as the session would hold
them (`Said`); a session entry is a chat message of some chat, or a push.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backthink.models import SessionEntry

SPEAKING = ("user", "assistant")


@dataclass(frozen=True)
class Said:
    """One user or assistant message of a chat request, as the session would hold it."""

    role: str
    text: str
    image: str | None = None
    index: int = -1
    """Its position in the request's `messages` list."""

    def same(self, role: str, text: str) -> bool:
        """Whether a session message says this (outer whitespace aside)."""
        return role == self.role and text.strip() == self.text.strip()


def content_text(content: Any) -> tuple[str, str | None]:
    """The text of a chat message's content (a string or a list of parts) and its first image."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        return "", None
    texts: list[str] = []
    image: str | None = None
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "image_url" and image is None:
            url = part.get("image_url")
            found = url.get("url") if isinstance(url, Mapping) else url
            image = found if isinstance(found, str) else None
    return "\n".join(texts), image


def said(messages: Sequence[Any]) -> list[Said]:
    """The user and assistant messages of a request that say something, in order."""
    out: list[Said] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in SPEAKING:
            continue
        text, image = content_text(message.get("content"))
        if text.strip() or image is not None:
            out.append(Said(str(message["role"]), text, image, index))
    return out


@dataclass(frozen=True)
class ChatKey:
    """The chat a matched history belongs to: known once a chat message of it matched."""

    known: bool = False
    chat_id: str | None = None


def is_chat(entry: SessionEntry) -> bool:
    """Whether an entry is a chat message (not a push)."""
    return entry.message.origin == "chat"


def delivered_push(entry: SessionEntry) -> bool:
    """Whether an entry is a push the companion delivered."""
    return entry.message.origin == "proactive" and entry.delivery == "delivered"


def in_chat(entry: SessionEntry, chat: ChatKey) -> bool:
    """Whether an entry is a chat message of `chat`."""
    return is_chat(entry) and entry.message.chat_id == chat.chat_id


def same(said_: Said, entry: SessionEntry) -> bool:
    """Whether a session entry says what a request's message says."""
    return said_.same(entry.message.role, entry.message.text)
