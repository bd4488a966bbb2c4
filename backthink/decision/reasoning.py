"""A reply's reasoning blocks (`<think>…</think>`), cut out before anything is parsed."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_OPEN = re.compile(r"<\s*think(?:ing)?\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*/\s*think(?:ing)?\s*>", re.IGNORECASE)


@dataclass(frozen=True)
class Split:
    """A reply cut into its visible text and its reasoning blocks."""

    visible: str
    thinking: tuple[str, ...]
    unclosed: bool
    """An opening tag was never closed: everything after it is thinking."""


def unify_newlines(text: str) -> str:
    """The text with CRLF and lone CR line ends written as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_thinking(text: str) -> Split:
    """Split a reply into its visible text and its reasoning blocks.

    A closed block is cut out where it stands and the text on both sides is kept,
    so a reply may think between its footer and its body. Only two things swallow
    text: an opening tag that is never closed (the rest is thinking) and a closing
    tag without an opening one (the server already consumed the opening tag, so
    everything before it is thinking). A removed block leaves a line break behind:
    tags never span lines, so the two sides can never join into a new tag.
    """
    text = unify_newlines(text)
    kept: list[str] = []
    thinking: list[str] = []
    pos = 0
    # The next tags at or after `pos`, searched again only once `pos` passes them, so
    # a reply of many tags is read in one pass however they are arranged.
    opening = _THINK_OPEN.search(text)
    closing = _THINK_CLOSE.search(text)
    while True:
        if opening is not None and opening.start() < pos:
            opening = _THINK_OPEN.search(text, pos)
        if closing is not None and closing.start() < pos:
            closing = _THINK_CLOSE.search(text, pos)
        if closing is not None and (opening is None or closing.start() < opening.start()):
            thinking.append("".join(kept) + text[pos : closing.start()])
            kept = []
            pos = closing.end()
        elif opening is not None:
            kept.append(text[pos : opening.start()])
            block_end = closing
            if block_end is not None and block_end.start() < opening.end():
                block_end = _THINK_CLOSE.search(text, opening.end())
            if block_end is None:
                thinking.append(text[opening.end() :])
                return Split("".join(kept), tuple(thinking), True)
            thinking.append(text[opening.end() : block_end.start()])
            kept.append("\n")
            pos = block_end.end()
        else:
            kept.append(text[pos:])
            return Split("".join(kept), tuple(thinking), False)


def fold_thought(text: str, *, max_chars: int) -> str:
    """A thought as the journal keeps it: whitespace folded, the start cut past `max_chars`.

    A thought ends with what it concluded, so past `max_chars` the beginning goes.
    """
    thought = " ".join(text.split())
    if max_chars <= 0:
        return ""
    return thought if len(thought) <= max_chars else "…" + thought[len(thought) - max_chars + 1 :]
