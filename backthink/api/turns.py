"""What a relayed chat turn does to the session, and where it shows the model the pushes: pure.

A chat front-end sends the whole conversation on every turn. The relay
stores only what the session does not hold yet, marks `superseded` what an
edit or a branch left behind, and shows the model the companion's pushes at
their place in time.

Chats. Each stored turn carries its chat: the front-end's own chat id
(`X-OpenWebUI-Chat-Id`, `X-Backthink-Chat`), or, for a front-end that names
none, an id the relay gives a chat when it begins (`RELAY_CHAT` + hex). A
request is only ever compared with its own chat, so two chats side by side
never supersede each other.

Matching. The request's history before its trailing user messages is
matched, from its end back, against the session's newest messages by role
and text; pushes the front-end does not show and other chats' messages are
stepped over, a message of this chat the request lacks stops the match. The
last `ANCHOR` messages must match (or the session's window ends): that is
the anchor. What this chat holds after the anchor is compared with the
trailing user messages:

- nothing: a new turn, every trailing user message is new;
- user messages that begin with them: a retry after a failed call, or a
  regenerated reply. Nothing is stored twice; the reply the session holds
  for that turn is the one a regenerated reply replaces, and anything after
  it (a branch from an earlier reply) is superseded;
- anything else: an edit, or a branch; all of it is superseded and the
  trailing messages are new.

Message ids (`X-Backthink-Message`, `X-Backthink-Parent`) make this exact:
a message id the session holds is that turn regenerated, whatever the text
says; a new one is never a regenerate; an empty parent is a chat's first
message, so a new first message of a chat the session knows is an edit of
it. Without an anchor (a first turn, or a history the session never saw),
the session's last turn holds the trailing messages only while it is
unanswered (a retry after a failed call); the one case content cannot tell
is a first turn regenerated without message ids: it is stored once more.

The matched history also says where the pushes go (`backthink.api.placing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from backthink.api.placing import Placed, placed, pushes_between, shown_texts
from backthink.api.said import (
    SPEAKING,
    ChatKey,
    Said,
    delivered_push,
    in_chat,
    is_chat,
    said,
    same,
)
from backthink.models import SessionEntry

ANCHOR = 3  # messages before the new ones that must match the session's, at most
RELAY_CHAT = "relay:"
"""The start of the chat ids the relay gives chats whose front-end names none."""


@dataclass(frozen=True)
class Ids:
    """What the front-end says of the turn beside its messages (headers)."""

    chat: str | None = None
    """Its chat's id; None when it names none."""
    message: str | None = None
    """The id of the turn's user message."""
    parent: str | None = None
    """The id of the reply it follows: "" on a chat's first message, None when not sent."""


@dataclass(frozen=True)
class Turn:
    """What the relay does with one chat request."""

    new: list[Said]
    """The trailing user messages the session does not hold yet, to be stored."""
    placed: Placed = field(default_factory=list)
    """Pushes to show, each group before the request message at that index."""
    replaces: SessionEntry | None = None
    """The session's reply to this very turn, which a regenerated reply takes the place of."""
    superseded: list[int] = field(default_factory=list)
    """Ids of the session messages an edit or a branch left behind."""
    chat_id: str | None = None
    """The chat the turn's messages belong to (None: the chat of messages stored before chats)."""
    new_chat: bool = False
    """The turn begins a chat that names no id: the relay gives it one."""
    client_id: str | None = None
    """The front-end's id of the turn's user message, kept with it."""

    @property
    def pushes(self) -> list[SessionEntry]:
        """Every push the forwarded request shows, in order."""
        return [p for _, group in self.placed for p in group]


def plan(messages: Sequence[Any], session: Sequence[SessionEntry], ids: Ids | None = None) -> Turn:
    """Decide what a chat request does to the session and where it shows which pushes.

    Args:
        messages: the request's `messages`, as the front-end sent them.
        session: the session's newest messages, oldest first, none superseded.
        ids: the chat and message ids the front-end sent, if any.
    """
    ids = ids or Ids()
    spoken = said(messages)
    trailing = len(spoken)
    while trailing > 0 and spoken[trailing - 1].role == "user":
        trailing -= 1
    new, before = spoken[trailing:], spoken[:trailing]
    entries = [e for e in session if e.message.role in SPEAKING]
    in_scope = _scope(ids.chat)
    pairs, chat = _anchor(before, entries, in_scope)
    if ids.chat is not None:
        chat = ChatKey(True, ids.chat)
    held = _held_by_id(entries, ids, in_scope) if new else None
    if held is not None:
        return _regenerated(new, before, entries, pairs, held, ids)
    if not pairs:
        return _unanchored(new, before, entries, ids, in_scope)
    anchor = pairs[-1][1]
    after = [j for j in range(anchor + 1, len(entries)) if chat.known and in_chat(entries[j], chat)]
    count, replaces, superseded = (0, None, after) if ids.message else _compare(new, entries, after)
    return Turn(
        new[count:],
        placed(before, new, entries, pairs, chat),
        replaces,
        [_id(entries[j]) for j in superseded],
        chat_id=chat.chat_id,
        new_chat=not chat.known,
        client_id=ids.message,
    )


def _scope(chat: str | None) -> Callable[[SessionEntry], bool]:
    """Which chat messages a request may be matched with: its chat's, or those of unnamed chats."""
    if chat is not None:
        return lambda e: e.message.chat_id == chat
    return lambda e: not _named(e.message.chat_id)


def _named(chat_id: str | None) -> bool:
    """Whether a chat id is a front-end's own (not one the relay gave)."""
    return chat_id is not None and not chat_id.startswith(RELAY_CHAT)


def _id(entry: SessionEntry) -> int:
    """A stored entry's id."""
    assert entry.message.id is not None, "session entries are stored messages"
    return entry.message.id


def _anchor(
    before: Sequence[Said],
    entries: Sequence[SessionEntry],
    in_scope: Callable[[SessionEntry], bool],
) -> tuple[list[tuple[int, int]], ChatKey]:
    """Where the request's history matches the session, from its end back, and the chat it is.

    Returns (request position in `before`, session position) pairs, oldest
    first (empty without an anchor), and the chat of its newest matched chat
    message (not known when only pushes matched).
    """
    if not before:
        return [], ChatKey()
    last = before[-1]
    for end in range(len(entries) - 1, -1, -1):
        entry = entries[end]
        if not same(last, entry) or not (
            delivered_push(entry) or (is_chat(entry) and in_scope(entry))
        ):
            continue
        pairs, chat, ended = _walk(before, entries, end, in_scope, ANCHOR)
        if len(pairs) == min(ANCHOR, len(before)) or ended:
            pairs, chat, _ = _walk(before, entries, end, in_scope, len(before))
            return pairs[::-1], chat
    return [], ChatKey()


def _walk(
    before: Sequence[Said],
    entries: Sequence[SessionEntry],
    end: int,
    in_scope: Callable[[SessionEntry], bool],
    most: int,
) -> tuple[list[tuple[int, int]], ChatKey, bool]:
    """Match `before` back from `entries[end]`, at most `most` messages; newest pair first.

    Pushes and other chats' messages are stepped over; a message of this chat
    that differs stops it. Returns the pairs, the chat, and whether the
    session's window ran out first.
    """
    pairs: list[tuple[int, int]] = []
    chat = ChatKey()
    wanted, at = len(before) - 1, end
    while wanted >= 0 and at >= 0 and len(pairs) < most:
        entry = entries[at]
        if is_chat(entry):
            if not in_scope(entry) or (chat.known and entry.message.chat_id != chat.chat_id):
                at -= 1
                continue
            if not same(before[wanted], entry):
                return pairs, chat, False
            if not chat.known:
                chat = ChatKey(True, entry.message.chat_id)
            pairs.append((wanted, at))
            wanted -= 1
        elif same(before[wanted], entry):
            pairs.append((wanted, at))
            wanted -= 1
        at -= 1
    return pairs, chat, at < 0 and wanted >= 0


def _compare(
    new: Sequence[Said], entries: Sequence[SessionEntry], after: Sequence[int]
) -> tuple[int, SessionEntry | None, list[int]]:
    """What the chat holds after the anchor against the new messages, by content.

    Returns how many new messages it holds, the reply a regenerated one
    replaces, and the positions it leaves behind.
    """
    users = [j for j in after if entries[j].message.role == "user"]
    count = 0
    while count < min(len(new), len(users)) and same(new[count], entries[users[count]]):
        count += 1
    if count == 0:
        return 0, None, list(after)
    rest = [j for j in after if j > users[count - 1]]
    reply = None
    if count == len(new) and rest and entries[rest[0]].message.role == "assistant":
        reply = entries[rest[0]]
        rest = rest[1:]
    return count, reply, rest


def _held_by_id(
    entries: Sequence[SessionEntry], ids: Ids, in_scope: Callable[[SessionEntry], bool]
) -> int | None:
    """The position of the user message the front-end names by id, when the session holds it."""
    if not ids.message:
        return None
    for at in range(len(entries) - 1, -1, -1):
        entry = entries[at]
        if entry.message.client_id == ids.message and is_chat(entry) and in_scope(entry):
            return at if entry.message.role == "user" else None
    return None


def _regenerated(
    new: Sequence[Said],
    before: Sequence[Said],
    entries: Sequence[SessionEntry],
    pairs: Sequence[tuple[int, int]],
    held: int,
    ids: Ids,
) -> Turn:
    """A turn whose user message the session holds by id: its reply is asked again."""
    chat = ChatKey(True, entries[held].message.chat_id)
    rest = [j for j in range(held + 1, len(entries)) if in_chat(entries[j], chat)]
    replaces = None
    if rest and entries[rest[0]].message.role == "assistant":
        replaces = entries[rest[0]]
        rest = rest[1:]
    if pairs:
        shown = placed(before, new, entries, pairs, chat)
    else:
        cut = _last_chat(entries, held, set())
        group = pushes_between(entries, cut, len(entries), set(), shown_texts(before))
        shown = [(new[0].index, group)] if group else []
    return Turn(
        [],
        shown,
        replaces,
        [_id(entries[j]) for j in rest],
        chat_id=chat.chat_id,
        client_id=ids.message,
    )


def _unanchored(
    new: Sequence[Said],
    before: Sequence[Said],
    entries: Sequence[SessionEntry],
    ids: Ids,
    in_scope: Callable[[SessionEntry], bool],
) -> Turn:
    """A turn whose history the session does not hold: a chat's first turn, or one never seen."""
    chat = [k for k, e in enumerate(entries) if is_chat(e) and in_scope(e)]
    superseded: list[int] = []
    count, first_held = 0, None
    if ids.chat is not None and ids.parent == "" and ids.message and not before:
        # A new first message of a chat the session knows: that chat was edited from its start.
        superseded = [k for k in chat if entries[k].message.chat_id == ids.chat]
    else:
        start = _last_turn(entries, chat)
        if all(entries[k].message.role == "user" for k in chat if k >= start):
            count, first_held = _held_in(new, entries, [k for k in chat if k >= start])
    gone = set(superseded)
    end = first_held if first_held is not None else len(entries)
    cut = _last_chat(entries, end, gone)
    shown = shown_texts(before)
    group = pushes_between(entries, cut, len(entries), set(), shown) if new else []
    chat_id = ids.chat
    if chat_id is None and first_held is not None:
        chat_id = entries[first_held].message.chat_id
    return Turn(
        list(new[count:]),
        [(new[0].index, group)] if group else [],
        None,
        [_id(entries[k]) for k in superseded],
        chat_id=chat_id,
        new_chat=chat_id is None and first_held is None,
        client_id=ids.message,
    )


def _held_in(
    new: Sequence[Said], entries: Sequence[SessionEntry], users: Sequence[int]
) -> tuple[int, int | None]:
    """How many new messages (from the first) the unanswered last turn holds, and its start."""
    for count in range(min(len(new), len(users)), 0, -1):
        tail = users[len(users) - count :]
        if all(same(s, entries[k]) for s, k in zip(new, tail, strict=False)):
            return count, tail[0]
    return 0, None


def _last_turn(entries: Sequence[SessionEntry], chat: Sequence[int]) -> int:
    """Where the last turn (user messages, then any replies) of `chat` begins in `entries`."""
    start = len(chat)
    while start > 0 and entries[chat[start - 1]].message.role == "assistant":
        start -= 1
    while start > 0 and entries[chat[start - 1]].message.role == "user":
        start -= 1
    return chat[start] if start < len(chat) else len(entries)


def _last_chat(entries: Sequence[SessionEntry], end: int, gone: set[int]) -> int:
    """The position of the owner's last turn before `end`: the last chat message, of any chat."""
    return max((k for k in range(end) if is_chat(entries[k]) and k not in gone), default=-1)
