"""Where a forwarded chat request shows the companion's pushes: at their place in time, pure.

A delivered push the request does not show goes between the two request
messages it came between in the session; before the trailing user messages
when it came after the request's history; and before the first message of a
chat when it came after the owner's last turn before that message (a chat
begun after a push sees it on every turn). At most `MAX_PUSHES` go in one
place, the newest; the front-end's own messages are never changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from backthink.api.said import ChatKey, Said, delivered_push, in_chat, is_chat
from backthink.models import SessionEntry

MAX_PUSHES = 5  # pushes put in one place of a forwarded request, at most (the newest)

Placed = list[tuple[int, list[SessionEntry]]]
"""Groups of pushes, each shown before the request message at that index."""


def with_pushes(messages: Sequence[Any], placed: Placed) -> list[Any]:
    """The request's messages with the pushes put in their places, the rest as they are."""
    if not placed:
        return list(messages)
    at = dict(placed)
    out: list[Any] = []
    for index, message in enumerate(messages):
        for push in at.get(index, ()):
            out.append({"role": "assistant", "content": push.message.text})
        out.append(message)
    return out


def pushes_between(
    entries: Sequence[SessionEntry], low: int, high: int, matched: set[int], shown: set[str]
) -> list[SessionEntry]:
    """The delivered pushes strictly between two positions that the request does not show."""
    found = [
        entries[k]
        for k in range(low + 1, high)
        if delivered_push(entries[k])
        and k not in matched
        and entries[k].message.text.strip() not in shown
    ]
    return found[-MAX_PUSHES:]


def shown_texts(before: Sequence[Said]) -> set[str]:
    """What the request's assistant messages say: pushes it shows already are not added."""
    return {s.text.strip() for s in before if s.role == "assistant"}


def placed(
    before: Sequence[Said],
    new: Sequence[Said],
    entries: Sequence[SessionEntry],
    pairs: Sequence[tuple[int, int]],
    chat: ChatKey,
) -> Placed:
    """The pushes of a request whose history matched the session at `pairs`.

    Args:
        before: the request's messages before its trailing user messages.
        new: its trailing user messages.
        entries: the session's newest messages.
        pairs: (position in `before`, position in `entries`) of each matched
            message, oldest first; the last is the anchor.
        chat: the chat the history belongs to.
    """
    matched = {j for _, j in pairs}
    shown = shown_texts(before)
    first_at, first_entry = pairs[0]
    # Before the chat's first message: back to the owner's last turn (of any chat); before
    # a later one the matching stopped at: back to this chat's message before it.
    low = first_entry - 1
    while low >= 0 and not (
        is_chat(entries[low]) and (first_at == 0 or in_chat(entries[low], chat))
    ):
        low -= 1
    found = [(before[first_at].index, pushes_between(entries, low, first_entry, matched, shown))]
    for (_, j_a), (i_b, j_b) in itertools.pairwise(pairs):
        found.append((before[i_b].index, pushes_between(entries, j_a, j_b, matched, shown)))
    if new:
        anchor = pairs[-1][1]
        found.append((new[0].index, pushes_between(entries, anchor, len(entries), matched, shown)))
    return [(i, group) for i, group in found if group]
