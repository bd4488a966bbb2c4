"""What a relayed chat turn adds to the session, and which pushes it shows the model: pure.

A chat front-end sends the whole conversation on every turn. The relay
stores only what the session does not hold yet, and puts the companion's
pushes since the front-end's previous turn into the request it forwards.

The front-end's history is matched against the session's newest messages by
role and text. Its last messages before the trailing user messages (the
"anchor", up to `ANCHOR` of them) are looked for in the session, newest
first; what the session holds after the anchor is compared with the trailing
user messages:

- nothing after it: a new turn, every trailing user message is new;
- user messages that end with the first of the trailing ones (and perhaps
  replies): a retry after a failed call, or a regenerated reply; what the
  session holds is not stored twice;
- other user messages: the front-end edited its last turn; the edited text is
  new and is stored.

Without an anchor (a first turn, or a history the session never saw) the
session's last turn stands in for what follows it. The pushes are those
delivered after the anchor (or after the session's last turn before the new
one), newest `MAX_PUSHES` of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backthink.models import SessionEntry

ANCHOR = 3  # messages before the new ones that must match the session's, at most
MAX_PUSHES = 5  # pushes put into one forwarded request, at most (the newest)
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


@dataclass(frozen=True)
class Turn:
    """What the relay does with one chat request."""

    new: list[Said]
    """The trailing user messages the session does not hold yet, to be stored."""
    pushes: list[SessionEntry]
    """Pushes to insert before the newest user message of the forwarded request."""
    newest_user: int | None
    """The index of the newest user message in the request's `messages`, if any."""


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


def plan(messages: Sequence[Any], session: Sequence[SessionEntry]) -> Turn:
    """Decide what a chat request adds to the session and which pushes it is shown.

    Args:
        messages: the request's `messages`, as the front-end sent them.
        session: the session's newest messages, oldest first.
    """
    spoken = said(messages)
    trailing = len(spoken)
    while trailing > 0 and spoken[trailing - 1].role == "user":
        trailing -= 1
    new, before = spoken[trailing:], spoken[:trailing]
    chat = [
        (i, e)
        for i, e in enumerate(session)
        if e.message.origin == "chat" and e.message.role in SPEAKING
    ]
    at = _anchor(before, chat)
    if at is not None:
        after = [e for _, e in chat[at + 1 :]]
        cut = chat[at][0]
    else:
        start = _last_turn(chat)
        after = [e for _, e in chat[start:]]
        cut = chat[start - 1][0] if start > 0 else -1
    held = _held(new, [e for e in after if e.message.role == "user"])
    pushes = [
        e
        for e in session[cut + 1 :]
        if e.message.origin == "proactive" and e.delivery == "delivered"
    ][-MAX_PUSHES:]
    return Turn(new[held:], pushes, _newest_user(messages))


def _anchor(before: Sequence[Said], chat: Sequence[tuple[int, SessionEntry]]) -> int | None:
    """The position in `chat` of the front-end's last message before the new ones, if found."""
    if not before:
        return None
    tail = before[-ANCHOR:]
    for end in range(len(chat) - 1, -1, -1):
        window = chat[max(0, end + 1 - len(tail)) : end + 1]
        pairs = zip(reversed(tail), reversed(window), strict=False)
        if all(s.same(e.message.role, e.message.text) for s, (_, e) in pairs):
            return end
    return None


def _held(new: Sequence[Said], users: Sequence[SessionEntry]) -> int:
    """How many of the new messages (from the first) the session's last user messages are."""
    for count in range(min(len(new), len(users)), 0, -1):
        tail = users[len(users) - count :]
        if all(s.same("user", e.message.text) for s, e in zip(new[:count], tail, strict=True)):
            return count
    return 0


def _last_turn(chat: Sequence[tuple[int, SessionEntry]]) -> int:
    """Where the session's last turn (user messages, then any replies) begins in `chat`."""
    start = len(chat)
    while start > 0 and chat[start - 1][1].message.role == "assistant":
        start -= 1
    while start > 0 and chat[start - 1][1].message.role == "user":
        start -= 1
    return start


def _newest_user(messages: Sequence[Any]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, Mapping) and message.get("role") == "user":
            return index
    return None


def with_pushes(messages: Sequence[Any], turn: Turn) -> list[Any]:
    """The request's messages with the turn's pushes right before its newest user message.

    The front-end's own messages are kept as they are, in their order.
    """
    if not turn.pushes or turn.newest_user is None:
        return list(messages)
    inserted = [{"role": "assistant", "content": e.message.text} for e in turn.pushes]
    at = turn.newest_user
    return [*messages[:at], *inserted, *messages[at:]]
