"""The grammar of one footer tag (`[我决定:push]`, `【urgency：warning】`), wherever it stands.

The footer parser reads tags at the end of a reply; the echo guard, the
journal and the request builder look for them in outside text, to keep them
from ever passing for the companion's own. All of them read tags here.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from backthink.protocol import FOOTER_KEYS

# Both languages are always accepted, whatever language the prompt used.
_KIND_BY_KEY: Final = {
    key: kind for keys in FOOTER_KEYS.values() for kind, key in keys._asdict().items()
}

# A tag never spans lines: whitespace inside it excludes "\n", so removing or cutting
# lines can never join two fragments into a new tag. Keys are matched loosely here and
# then compared exactly after lower(), because IGNORECASE would also fold look-alikes.
_TAG = re.compile(
    r"[\[【][^\S\n]*(?P<key>[^\[\]【】:：\n]{1,24}?)[^\S\n]*[:：]"
    r"[^\S\n]*(?P<value>[^\[\]【】\n]{0,80}?)[^\S\n]*[\]】]"
)
# Markdown decoration a model may put before or between tags (bullets, bold, quotes).
_LINE_PREFIX = re.compile(r"[\s>*_•·`+-]*")
_TAG_SEPARATOR = re.compile(r"[\s*_,，、;；|`]*")


class Tag(NamedTuple):
    """One footer tag: its kind (`decision`, `channel`, `urgency`) and its value, lowercased."""

    kind: str
    value: str


def tags_in(text: str) -> list[Tag]:
    """Every footer tag of either language in a text, in order."""
    found = (_as_tag(match) for match in _TAG.finditer(text))
    return [tag for tag in found if tag is not None]


def has_tags(text: str) -> bool:
    """Whether the text holds a footer tag of either language, as the parser reads them."""
    return bool(tags_in(text))


def without_tags(text: str) -> str:
    """Replace every footer tag with a space, leaving the words around it."""
    return _TAG.sub(lambda match: " " if _as_tag(match) is not None else match[0], text)


def leading_tags(line: str) -> tuple[list[Tag], str] | None:
    """Split a line that starts with footer tags into its tags and the text after them."""
    tags: list[Tag] = []
    pos = _skip(_LINE_PREFIX, line, 0)
    while (match := _TAG.match(line, pos)) is not None:
        tag = _as_tag(match)
        if tag is None:
            break
        tags.append(tag)
        pos = _skip(_TAG_SEPARATOR, line, match.end())
    return (tags, line[pos:]) if tags else None


def _as_tag(match: re.Match[str]) -> Tag | None:
    kind = _KIND_BY_KEY.get(match["key"].strip().lower())
    return None if kind is None else Tag(kind, match["value"].strip().lower())


def _skip(pattern: re.Pattern[str], line: str, pos: int) -> int:
    match = pattern.match(line, pos)
    return pos if match is None else match.end()
