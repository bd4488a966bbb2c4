"""What a relayed chat turn adds to the session, and which pushes it shows the model: pure.

A chat front-end sends the whole conversation on every turn. The relay
stores only what the session does not hold yet, and puts the companion's
pushes since the front-end's previous turn into the request it forwards.

The front-end's history is matched against the session's newest messages by
role and text. Its last messages before the trailing user messages (the
"anchor", up to `ANCHOR` of them) are looked for in the session, newest
first. A front-end may show the pushes among its messages or not: a push
matches an assistant message of the request when it says the same, and is
stepped over when the request lacks it; a chat message it lacks breaks the
match. What the session holds after the anchor is compared with the
trailing user messages:

- nothing after it: a new turn, every trailing user message is new;
- user messages that end with the first of the trailing ones: a retry after
  a failed call, or a regenerated reply. What the session holds is not
  stored twice, and a reply the session holds for that turn is the one a
  regenerated reply replaces;
- other user messages: the front-end edited its last turn; the edited text is
  new and is stored.

Without an anchor (a first turn, or a history the session never saw) the
session's last turn stands in for what came before, and holds the trailing
messages only while it is unanswered (a retry after a failed call): a new
chat that opens with the words of the session's last question is a new
question. The one case this cannot tell apart is a first turn regenerated:
its question and reply are stored once more.

The pushes shown are those delivered after the anchor (without one: after
the session's last chat message before the turn), newest `MAX_PUSHES` of
them, less those the request holds already; they go right before the run of
trailing user messages.
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
    """Pushes to insert before the trailing user messages of the forwarded request."""
    insert_at: int | None
    """The index in the request's `messages` the pushes go before (None: nowhere)."""
    replaces: SessionEntry | None = None
    """The session's reply to this very turn, which a regenerated reply takes the place of."""


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
    entries = [e for e in session if e.message.role in SPEAKING]
    chat = [k for k, e in enumerate(entries) if e.message.origin == "chat"]
    anchor = _anchor(before, entries)
    if anchor is not None:
        held, replaces, first_held = _held(new, entries, anchor + 1)
        cut = anchor
    else:
        start = _last_turn(entries, chat)
        held, replaces, first_held = 0, None, None
        if all(entries[k].message.role == "user" for k in chat if k >= start):
            held, replaces, first_held = _held(new, entries, start)
        end = first_held if first_held is not None else len(entries)
        cut = max((k for k in chat if k < end), default=-1)
    shown = {s.text.strip() for s in before if s.role == "assistant"}
    pushes = [
        e
        for e in entries[cut + 1 :]
        if e.message.origin == "proactive"
        and e.delivery == "delivered"
        and e.message.text.strip() not in shown
    ][-MAX_PUSHES:]
    return Turn(new[held:], pushes, new[0].index if new else None, replaces)


def _same(said_: Said, entry: SessionEntry) -> bool:
    """Whether a session entry says what a request's message says."""
    return said_.same(entry.message.role, entry.message.text)


def _anchor(before: Sequence[Said], entries: Sequence[SessionEntry]) -> int | None:
    """The position in `entries` of the front-end's last message before the new ones, if found."""
    if not before:
        return None
    tail = before[-ANCHOR:]
    for end in range(len(entries) - 1, -1, -1):
        if _matches_back(tail, entries, end):
            return end
    return None


def _matches_back(tail: Sequence[Said], entries: Sequence[SessionEntry], end: int) -> bool:
    """Whether `tail` ends at `entries[end]`, stepping over pushes the front-end does not show."""
    if not _same(tail[-1], entries[end]):
        return False
    wanted, at = len(tail) - 2, end - 1
    while wanted >= 0 and at >= 0:
        entry = entries[at]
        if _same(tail[wanted], entry):
            wanted -= 1
        elif entry.message.origin != "proactive":
            return False
        at -= 1
    # Matched all of it, or the session begins here.
    return True


def _held(
    new: Sequence[Said], entries: Sequence[SessionEntry], start: int
) -> tuple[int, SessionEntry | None, int | None]:
    """How many of the new messages (from the first) the session holds from `start` on.

    Returns that count, the session's latest reply after them when it holds
    them all (the reply a regenerated one replaces), and the position of the
    first held message.
    """
    users = [k for k in range(start, len(entries)) if _chat(entries[k], "user")]
    for count in range(min(len(new), len(users)), 0, -1):
        tail = users[len(users) - count :]
        if all(s.same("user", entries[k].message.text) for s, k in zip(new, tail, strict=False)):
            replies = [entries[k] for k in range(tail[-1] + 1, len(entries))]
            reply = next((e for e in reversed(replies) if _chat(e, "assistant")), None)
            return count, reply if count == len(new) else None, tail[0]
    return 0, None, None


def _chat(entry: SessionEntry, role: str) -> bool:
    """Whether an entry is a chat message (no push) of `role`."""
    return entry.message.origin == "chat" and entry.message.role == role


def _last_turn(entries: Sequence[SessionEntry], chat: Sequence[int]) -> int:
    """Where the session's last turn (user messages, then any replies) begins in `entries`."""
    start = len(chat)
    while start > 0 and entries[chat[start - 1]].message.role == "assistant":
        start -= 1
    while start > 0 and entries[chat[start - 1]].message.role == "user":
        start -= 1
    return chat[start] if start < len(chat) else len(entries)


def with_pushes(messages: Sequence[Any], turn: Turn) -> list[Any]:
    """The request's messages with the turn's pushes right before its trailing user messages.

    The front-end's own messages are kept as they are, in their order.
    """
    if not turn.pushes or turn.insert_at is None:
        return list(messages)
    inserted = [{"role": "assistant", "content": e.message.text} for e in turn.pushes]
    at = turn.insert_at
    return [*messages[:at], *inserted, *messages[at:]]
