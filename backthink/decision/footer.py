"""The footer protocol: the last run of tag lines of a reply, read fail-safe into a Decision.

The model ends its thinking with a footer (`[我决定:push]`, an optional
channel and urgency) and then the message body. Everything before the
footer is the model's own thinking and never part of the body; anything
unclear falls back to "no push", and an urgency is never guessed upwards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from backthink.decision.failsafe import (
    CHANNEL_UNCLEAR,
    CONFLICTING_DECISIONS,
    DEFAULT_MAX_BODY_CHARS,
    EMPTY_REPLY,
    NO_DECISION,
    NOTHING_TO_SAY,
    UNCLOSED_THINK,
    URGENCY_UNCLEAR,
    says_nothing,
    settle,
)
from backthink.decision.reasoning import split_thinking
from backthink.decision.tags import Tag, leading_tags, tags_in
from backthink.models import Decision, Urgency
from backthink.protocol import AUTO_CHANNEL, NO_PUSH, PUSH, URGENCY_VALUES

_NO_PUSH_SPELLINGS: Final = frozenset({NO_PUSH, "no-push", "nopush", "no push"})
_BODY_LEAD = re.compile(r"[\s*_,，、;；:：|`>—–-]*")
_FENCE_INFO = re.compile(r"[\w+#.-]*")
FENCE_MARKS = "`~"
_CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")


@dataclass(frozen=True)
class Footer:
    """Where a reply's footer stands among its lines, and what it says."""

    start: int
    """The index of the footer's first tag line."""
    end: int
    """The index of its last tag line: the body follows."""
    tags: list[Tag]
    rest: str
    """Text after the tags on the last tag line: the start of the body."""


def without_fences(visible: str) -> list[str]:
    """The visible lines of a reply, the lines of a code fence around it emptied."""
    return ["" if fence_line(line) else line for line in visible.split("\n")]


def fence_line(line: str) -> bool:
    """Whether a line opens or closes a code fence: three or more backticks (or tildes)
    and at most an info string such as `json`, spaces around them.

    Read by hand, not by one pattern: spaces on both sides of an optional info
    string would have a pattern try every split of a long run of spaces.
    """
    bare = line.strip()
    if not bare or bare[0] not in FENCE_MARKS:
        return False
    run = len(bare) - len(bare.lstrip(bare[0]))
    return run >= 3 and _FENCE_INFO.fullmatch(bare[run:].lstrip()) is not None


def without_trailing_fence(text: str) -> str:
    """The text without the run of three or more backticks (or tildes) that ends it.

    Read from the end, never searched for: a search for such a run tried at
    every backtick of a long run reads the run again each time.
    """
    end = len(text.rstrip())
    for mark in FENCE_MARKS:
        start = end
        while start > 0 and text[start - 1] == mark:
            start -= 1
        if end - start >= 3:
            return text[:start]
    return text


def find_footer(lines: Sequence[str]) -> Footer | None:
    """The last run of tag lines (blank lines may sit between them), or None without one."""
    last = next((i for i in reversed(range(len(lines))) if leading_tags(lines[i])), None)
    if last is None:
        return None
    tags, rest = leading_tags(lines[last]) or ([], "")
    start = last
    # Text after the tags on the last tag line starts the body ("[我决定:push] 早上好");
    # trailing text on earlier tag lines is dropped, since it sits before the footer ends.
    for index in range(last - 1, -1, -1):
        if not lines[index].strip():
            continue
        earlier = leading_tags(lines[index])
        if earlier is None:
            break
        tags = earlier[0] + tags
        start = index
    return Footer(start, last, tags, rest)


def footer_decision(
    lines: Sequence[str],
    footer: Footer | None,
    problems: list[str],
    *,
    max_body_chars: int,
) -> Decision:
    """The decision of a reply's fence-free visible lines and their footer.

    Args:
        lines: the visible lines (reasoning and fences removed).
        footer: `find_footer(lines)`.
        problems: what was already noted (an unclosed reasoning block).
        max_body_chars: the longest body that may still be pushed.
    """
    cleaned = "\n".join(lines)
    if not cleaned.strip():
        return Decision(problems=[*problems, EMPTY_REPLY])
    if says_nothing(cleaned):
        # A bare 无 / none is the model plainly saying it has nothing to say: a choice,
        # not a parse failure, so it is recorded as no_push.
        return Decision(problems=[*problems, NOTHING_TO_SAY])
    if footer is None:
        return Decision(problems=[*problems, NO_DECISION])
    everywhere = tags_in(cleaned)
    wants_push, decision_problem = _read_decision(footer.tags, everywhere)
    if decision_problem is not None:
        # When the decision itself is unreadable nothing else in the footer is trusted.
        return Decision(problems=[*problems, decision_problem])
    channel = _resolve_channel(footer.tags, everywhere, problems)
    urgency = _resolve_urgency(footer.tags, everywhere, problems)
    body = "\n".join([_BODY_LEAD.sub("", footer.rest, count=1), *lines[footer.end + 1 :]])
    body = without_trailing_fence(body.strip()).strip()
    return settle(
        wants_push,
        body,
        problems,
        max_body_chars=max_body_chars,
        channel=channel,
        urgency=urgency,
    )


def parse_footer(text: str, *, max_body_chars: int = DEFAULT_MAX_BODY_CHARS) -> Decision:
    """Read the decision, channel, urgency and body from a model reply.

    The footer is the last block of lines that start with tags; the body is what
    follows it. Everything before the footer is the model's own thinking and is
    never part of the body.

    Args:
        text: The raw model reply.
        max_body_chars: Longest body that may still be pushed.

    Returns:
        A Decision that pushes only when exactly one explicit push was written and
        a deliverable body follows it; otherwise push is False and `problems` says why.
    """
    split = split_thinking(text)
    lines = without_fences(split.visible)
    problems = [UNCLOSED_THINK] if split.unclosed else []
    return footer_decision(lines, find_footer(lines), problems, max_body_chars=max_body_chars)


def plausible_channel(value: str) -> bool:
    """Whether a written channel value can name a channel (or is `auto`)."""
    return value == AUTO_CHANNEL or _CHANNEL_NAME.fullmatch(value) is not None


def _values(tags: Iterable[Tag], kind: str) -> list[str]:
    return [tag.value for tag in tags if tag.kind == kind]


def _decision_class(value: str) -> str | None:
    if value == PUSH:
        return PUSH
    return NO_PUSH if value in _NO_PUSH_SPELLINGS else None


def _read_decision(footer: list[Tag], everywhere: list[Tag]) -> tuple[bool, str | None]:
    """Return whether one clear push was written, and the problem when the decision is unclear."""
    in_footer = [_decision_class(value) for value in _values(footer, "decision")]
    if not in_footer:
        return False, NO_DECISION
    # A clear decision anywhere else in the reply that disagrees makes the footer
    # untrustworthy; unreadable values outside the footer are just prose.
    classes = set(in_footer) | {
        cls for cls in map(_decision_class, _values(everywhere, "decision")) if cls is not None
    }
    if len(classes) > 1:
        return False, CONFLICTING_DECISIONS
    if classes == {None}:
        return False, NO_DECISION
    return classes == {PUSH}, None


def _resolve_urgency(footer: list[Tag], everywhere: list[Tag], problems: list[str]) -> Urgency:
    written = _values(footer, "urgency")
    if not written:
        return Urgency.ROUTINE
    seen = set(written) | {v for v in _values(everywhere, "urgency") if v in URGENCY_VALUES}
    # Disagreement or a value we cannot read lowers to routine; it is never guessed upwards.
    if len(seen) == 1 and written[0] in URGENCY_VALUES:
        return Urgency(written[0])
    problems.append(URGENCY_UNCLEAR)
    return Urgency.ROUTINE


def _resolve_channel(footer: list[Tag], everywhere: list[Tag], problems: list[str]) -> str | None:
    written = _values(footer, "channel")
    if not written:
        return None
    seen = set(written) | {v for v in _values(everywhere, "channel") if plausible_channel(v)}
    if len(seen) == 1 and written[0] == AUTO_CHANNEL:
        return None
    if len(seen) == 1 and plausible_channel(written[0]):
        return written[0]
    problems.append(CHANNEL_UNCLEAR)
    return None
