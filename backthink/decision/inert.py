"""Outside text made inert: no footer tag or marker of the request's structure survives in it.

Messages, memories, tool results, the state file and the owner's name are
outside text. Before any of it is written into a request, it goes through
here, so nothing in it can pass for a footer of the reply or for the
request's own speaker and time notes.
"""

from __future__ import annotations

from backthink.decision.tags import without_nested_tags
from backthink.protocol import ROLE_CONTEXT_MARKER, SPEAKER_SWITCH_MARKER, TIME_MARKER

# Markers of the request's own structure; memory text must not forge them.
_MARKERS = tuple(
    marker.strip() for marker in (ROLE_CONTEXT_MARKER, SPEAKER_SWITCH_MARKER, *TIME_MARKER.values())
)


def defuse(text: str) -> str:
    """Outside text with its footer tags removed and its structure markers unbracketed.

    Lines are kept (a tool's result may be a list); nothing in it can pass for
    a footer of the reply or for the request's own speaker and time notes.
    """
    # A removed tag may leave brackets that close around a new one: all levels go.
    text = without_nested_tags(text)
    for marker in _MARKERS:
        text = text.replace(marker, marker[1:-1])
    return text


def inert(text: str, limit: int, *, keep_end: bool = False) -> str:
    """One line of at most `limit` characters that no parser of the request reads as markup.

    Footer tags go, attribution and time markers lose their brackets, and
    whitespace runs fold, so an item can neither open lines of its own nor
    pass for the request's structure. A cut keeps the beginning, or with
    `keep_end` the end (a thought ends with what it concluded).
    """
    if limit <= 0:
        return ""
    text = " ".join(defuse(text).split())
    if len(text) <= limit:
        return text
    return "…" + text[len(text) - limit + 1 :] if keep_end else text[: limit - 1] + "…"
