"""The grammar of one footer tag (`[我决定:push]`, `【urgency：warning】`), wherever it stands.

The footer parser reads tags at the end of a reply; the echo guard, the
journal and the request builder look for them in outside text, to keep them
from ever passing for the companion's own. All of them read tags here.

A tag is an opening bracket, a key of at most `KEY_CHARS` characters, a
colon, a value of at most `VALUE_CHARS` characters and a closing bracket,
on one line, with spaces allowed around key and value. Outside text may be
anything, so tags are found by a hand scanner that reads each character a
bounded number of times: the time it takes grows with the text's length,
whatever the text holds (a pattern of nested quantifiers over the same
characters once took seconds over two hundred).
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from backthink.protocol import FOOTER_KEYS

# Both languages are always accepted, whatever language the prompt used.
_KIND_BY_KEY: Final = {
    key: kind for keys in FOOTER_KEYS.values() for kind, key in keys._asdict().items()
}

KEY_CHARS: Final = 24  # characters of a key, spaces around it not counted
VALUE_CHARS: Final = 80  # characters of a value, spaces around it not counted
OPENERS: Final = "[【"
CLOSERS: Final = "]】"
COLONS: Final = ":："

# One character class each, no repetition of a group: searching with these is linear.
_BRACKET = re.compile(r"[\[\]【】]")
# Markdown decoration a model may put before or between tags (bullets, bold, quotes).
_LINE_PREFIX = re.compile(r"[\s>*_•·`+-]*")
_TAG_SEPARATOR = re.compile(r"[\s*_,，、;；|`]*")


class Tag(NamedTuple):
    """One footer tag: its kind (`decision`, `channel`, `urgency`) and its value, lowercased."""

    kind: str
    value: str


class _Span(NamedTuple):
    """A bracketed key and value, whether or not the key is a footer key."""

    start: int
    end: int
    key: str
    value: str


def tags_in(text: str) -> list[Tag]:
    """Every footer tag of either language in a text, in order."""
    found = (_as_tag(span) for span in _spans(text))
    return [tag for tag in found if tag is not None]


def has_tags(text: str) -> bool:
    """Whether the text holds a footer tag of either language, as the parser reads them."""
    return any(_as_tag(span) is not None for span in _spans(text))


def without_tags(text: str) -> str:
    """Replace every footer tag with a space, leaving the words around it."""
    parts: list[str] = []
    pos = 0
    for span in _spans(text):
        if _as_tag(span) is not None:
            parts += [text[pos : span.start], " "]
            pos = span.end
    parts.append(text[pos:])
    return "".join(parts)


def without_nested_tags(text: str) -> str:
    """Remove tags until none is left, as `without_tags` repeated until nothing changes.

    A removed tag leaves a space, and brackets around it may then close
    around a new tag (`[我决定[x:y]:push]`). Repeating `without_tags` would
    read the text once per level of nesting; here each innermost bracket
    pair is judged when its closing bracket is read, and removed at once, so
    the text is read once whatever its depth. A removal only changes the
    text inside the brackets around it, so the order of removals does not
    change the result.
    """
    chunks: list[str] = []
    # Indexes into `chunks` of the brackets not yet removed, innermost last.
    brackets: list[int] = []
    pos = 0
    for match in _BRACKET.finditer(text):
        if match.start() > pos:
            chunks.append(text[pos : match.start()])
        pos = match.end()
        char = match[0]
        if char in OPENERS or not brackets or chunks[brackets[-1]] not in OPENERS:
            brackets.append(len(chunks))
            chunks.append(char)
            continue
        opener = brackets[-1]
        read = _read_inside("".join(chunks[opener + 1 :]))
        if read is not None and _KIND_BY_KEY.get(read[0].lower()) is not None:
            del chunks[opener:]
            brackets.pop()
            chunks.append(" ")
        else:
            brackets.append(len(chunks))
            chunks.append(char)
    chunks.append(text[pos:])
    return "".join(chunks)


def leading_tags(line: str) -> tuple[list[Tag], str] | None:
    """Split a line that starts with footer tags into its tags and the text after them."""
    if "[" not in line and "【" not in line:
        return None  # most lines of a reply: no bracket, no tag, nothing more to read
    tags: list[Tag] = []
    pos = _skip(_LINE_PREFIX, line, 0)
    while (span := _span_at(line, pos)) is not None:
        tag = _as_tag(span)
        if tag is None:
            break
        tags.append(tag)
        pos = _skip(_TAG_SEPARATOR, line, span.end)
    return (tags, line[pos:]) if tags else None


def _spans(text: str) -> list[_Span]:
    """Every bracket pair with nothing bracketed inside whose content reads as key: value.

    Only the closing bracket that comes first after an opening one can end a
    tag, so one pass over the brackets finds them all, left to right.
    """
    spans: list[_Span] = []
    opener = -1
    for match in _BRACKET.finditer(text):
        at = match.start()
        if match[0] in OPENERS:
            opener = at
            continue
        if opener >= 0:
            read = _read_inside(text[opener + 1 : at])
            if read is not None:
                spans.append(_Span(opener, at + 1, *read))
        opener = -1
    return spans


def _span_at(line: str, pos: int) -> _Span | None:
    """The tag-shaped span that starts exactly at `pos`, if one does."""
    if pos >= len(line) or line[pos] not in OPENERS:
        return None
    after = _BRACKET.search(line, pos + 1)
    if after is None or after[0] not in CLOSERS:
        return None
    read = _read_inside(line[pos + 1 : after.start()])
    return None if read is None else _Span(pos, after.end(), *read)


def _read_inside(inside: str) -> tuple[str, str] | None:
    """The key and value between a pair of brackets (no brackets inside), or None.

    The key runs to the first colon; key and value are read without the
    spaces around them. A line break anywhere inside means no tag: removing
    or cutting lines can never join two fragments into a new tag.
    """
    if "\n" in inside:
        return None
    colon = min((i for i in (inside.find(c) for c in COLONS) if i >= 0), default=-1)
    if colon <= 0:
        # No colon, or nothing before it: a key needs at least one character.
        return None
    key = inside[:colon].strip()
    value = inside[colon + 1 :].strip()
    if len(key) > KEY_CHARS or len(value) > VALUE_CHARS:
        return None
    return key, value


def _as_tag(span: _Span) -> Tag | None:
    # Keys are compared exactly after lower(); IGNORECASE-like folding would also
    # fold look-alikes, which the echo guard normalises on its own.
    kind = _KIND_BY_KEY.get(span.key.lower())
    return None if kind is None else Tag(kind, span.value.lower())


def _skip(pattern: re.Pattern[str], line: str, pos: int) -> int:
    match = pattern.match(line, pos)
    return pos if match is None else match.end()
