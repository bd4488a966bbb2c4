"""Parse the model's reply footer into a Decision; anything unclear falls back to "no push"."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from backthink.models import Decision, Reason, Urgency


class FooterKeys(NamedTuple):
    """The tag names of one prompt language."""

    decision: str
    channel: str
    urgency: str


class DecisionTokens(NamedTuple):
    """The two complete decision tags of one prompt language."""

    push: str
    no_push: str


PUSH: Final = "push"
NO_PUSH: Final = "no_push"
AUTO_CHANNEL: Final = "auto"
URGENCY_VALUES: Final = tuple(level.value for level in Urgency)

FOOTER_KEYS: Final[Mapping[str, FooterKeys]] = MappingProxyType(
    {
        "zh": FooterKeys(decision="我决定", channel="渠道", urgency="紧急"),
        "en": FooterKeys(decision="decision", channel="channel", urgency="urgency"),
    }
)


def footer_tag(key: str, value: str) -> str:
    """Render one footer tag exactly as the prompts teach it, e.g. ``[我决定:push]``."""
    return f"[{key}:{value}]"


DECISION_TOKENS: Final[Mapping[str, DecisionTokens]] = MappingProxyType(
    {
        lang: DecisionTokens(footer_tag(keys.decision, PUSH), footer_tag(keys.decision, NO_PUSH))
        for lang, keys in FOOTER_KEYS.items()
    }
)

# Problem codes recorded in Decision.problems; they are stable and end up in round records.
NO_DECISION: Final = "no_decision"
CONFLICTING_DECISIONS: Final = "conflicting_decisions"
EMPTY_REPLY: Final = "empty_reply"
NOTHING_TO_SAY: Final = "nothing_to_say"
EMPTY_BODY: Final = "empty_body"
BODY_TOO_LONG: Final = "body_too_long"
URGENCY_UNCLEAR: Final = "urgency_unclear"
CHANNEL_UNCLEAR: Final = "channel_unclear"
UNCLOSED_THINK: Final = "unclosed_think"
ECHOED_FOOTER: Final = "echoed_footer"
ECHOED_PROMPT: Final = "echoed_prompt"
# A reply asked for as one JSON object (model.output = "json_schema") that is not one.
INVALID_JSON: Final = "invalid_json"
NOT_AN_OBJECT: Final = "not_an_object"
MISSING_FIELD: Final = "missing_field"
UNKNOWN_FIELD: Final = "unknown_field"
DUPLICATE_FIELD: Final = "duplicate_field"
WRONG_TYPE: Final = "wrong_type"

# Problems that mean the decision itself could not be read.
UNREADABLE: Final = frozenset(
    {
        NO_DECISION,
        CONFLICTING_DECISIONS,
        EMPTY_REPLY,
        INVALID_JSON,
        NOT_AN_OBJECT,
        MISSING_FIELD,
        UNKNOWN_FIELD,
        DUPLICATE_FIELD,
        WRONG_TYPE,
    }
)
# Reason codes of a suppressed round, as listed in the design's outcome table.
_PARSE_FAILURES: Final = UNREADABLE | {ECHOED_FOOTER, ECHOED_PROMPT}

DEFAULT_MAX_BODY_CHARS: Final = 600  # characters

# Both languages are always accepted, whatever language the prompt used.
_KIND_BY_KEY: Final = {
    key: kind for keys in FOOTER_KEYS.values() for kind, key in keys._asdict().items()
}
_NO_PUSH_SPELLINGS: Final = frozenset({NO_PUSH, "no-push", "nopush", "no push"})
# A reply that says "nothing to say" in one word, with or without punctuation around it.
_NOTHING: Final = frozenset({"", "无", "没有", "none", "nothing", "null", "n/a"})
_NOTHING_PUNCT: Final = " \t\n。.！!「」『』“”\"'`*"

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
_BODY_LEAD = re.compile(r"[\s*_,，、;；:：|`>—–-]*")
_FENCE_LINE = re.compile(r"^[^\S\n]*(?:`{3,}|~{3,})[^\S\n]*[\w+#.-]*[^\S\n]*$", re.MULTILINE)
_TRAILING_FENCE = re.compile(r"(?:`{3,}|~{3,})\s*$")
_THINK_OPEN = re.compile(r"<\s*think(?:ing)?\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*/\s*think(?:ing)?\s*>", re.IGNORECASE)
_CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")


class _Tag(NamedTuple):
    kind: str
    value: str


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
    problems: list[str] = []
    cleaned, unclosed = _strip_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    if unclosed:
        problems.append(UNCLOSED_THINK)
    cleaned = _FENCE_LINE.sub("", cleaned)
    if not cleaned.strip():
        return Decision(problems=[*problems, EMPTY_REPLY])
    if _says_nothing(cleaned):
        # A bare 无 / none is the model plainly saying it has nothing to say: a choice,
        # not a parse failure, so it is recorded as no_push.
        return Decision(problems=[*problems, NOTHING_TO_SAY])
    footer = _find_footer(cleaned.split("\n"))
    if footer is None:
        return Decision(problems=[*problems, NO_DECISION])
    footer_tags, body = footer
    all_tags = _tags_in(cleaned)

    wants_push, decision_problem = _read_decision(footer_tags, all_tags)
    if decision_problem is not None:
        # When the decision itself is unreadable nothing else in the footer is trusted.
        return Decision(problems=[*problems, decision_problem])
    channel = _resolve_channel(footer_tags, all_tags, problems)
    urgency = _resolve_urgency(footer_tags, all_tags, problems)
    body = _TRAILING_FENCE.sub("", body.strip()).strip()
    if wants_push and _says_nothing(body):
        problems.append(EMPTY_BODY)
    elif wants_push and len(body) > max_body_chars:
        problems.append(BODY_TOO_LONG)
    push = wants_push and not {EMPTY_BODY, BODY_TOO_LONG} & set(problems)
    if not wants_push:
        # An explicit no_push carries no message; whatever follows it is not a body.
        body = ""
    return Decision(push=push, channel=channel, urgency=urgency, body=body, problems=problems)


def suppression_reason(decision: Decision) -> Reason | None:
    """Map a non-push decision to the round's reason code.

    Args:
        decision: A result of `parse_footer`.

    Returns:
        None for a push; `parse_failed`, `empty_body`, `body_too_long`, or
        `no_push` (the model chose not to speak) otherwise.
    """
    if decision.push:
        return None
    problems = set(decision.problems)
    if problems & _PARSE_FAILURES:
        return Reason.PARSE_FAILED
    if EMPTY_BODY in problems:
        return Reason.EMPTY_BODY
    if BODY_TOO_LONG in problems:
        return Reason.BODY_TOO_LONG
    return Reason.NO_PUSH


def without_tags(text: str) -> str:
    """Replace every footer tag with a space, leaving the words around it."""
    return _TAG.sub(lambda match: " " if _as_tag(match) is not None else match[0], text)


def has_tags(text: str) -> bool:
    """Whether the text holds a footer tag of either language, as the parser reads them."""
    return bool(_tags_in(text))


def strip_reasoning(text: str) -> tuple[str, bool]:
    """The reply without its reasoning blocks, and whether one was left open."""
    return _strip_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))


def reasoning_blocks(text: str) -> list[str]:
    """The texts of a reply's reasoning blocks, in order."""
    _, thinking, _ = _split_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    return thinking


def says_nothing(text: str) -> bool:
    """Whether a text is empty or only a one-word "nothing" (无, none, n/a)."""
    return _says_nothing(text)


def plausible_channel(value: str) -> bool:
    """Whether a written channel value can name a channel (or is `auto`)."""
    return _plausible_channel(value)


def fold_thought(text: str, *, max_chars: int) -> str:
    """A thought as the journal keeps it: tags removed, whitespace folded, the start cut.

    A thought ends with what it concluded, so past `max_chars` the beginning goes.
    """
    thought = " ".join(without_tags(text).split())
    if max_chars <= 0:
        return ""
    return thought if len(thought) <= max_chars else "…" + thought[len(thought) - max_chars + 1 :]


def _strip_thinking(text: str) -> tuple[str, bool]:
    """Drop reasoning blocks; report whether one was left open."""
    visible, _, unclosed = _split_thinking(text)
    return visible, unclosed


def _split_thinking(text: str) -> tuple[str, list[str], bool]:
    """Split a reply into its visible text and its reasoning blocks.

    A closed block is cut out where it stands and the text on both sides is kept,
    so a reply may think between its footer and its body. Only two things swallow
    text: an opening tag that is never closed (the rest is thinking) and a closing
    tag without an opening one (the server already consumed the opening tag, so
    everything before it is thinking). A removed block leaves a line break behind:
    tags never span lines, so the two sides can never join into a new tag.

    Returns:
        The visible text, the reasoning blocks' texts in order, and whether a
        block was left open.
    """
    kept: list[str] = []
    thinking: list[str] = []
    pos = 0
    while True:
        opening = _THINK_OPEN.search(text, pos)
        closing = _THINK_CLOSE.search(text, pos)
        if closing is not None and (opening is None or closing.start() < opening.start()):
            thinking.append("".join(kept) + text[pos : closing.start()])
            kept = []
            pos = closing.end()
        elif opening is not None:
            kept.append(text[pos : opening.start()])
            block_end = _THINK_CLOSE.search(text, opening.end())
            if block_end is None:
                thinking.append(text[opening.end() :])
                return "".join(kept), thinking, True
            thinking.append(text[opening.end() : block_end.start()])
            kept.append("\n")
            pos = block_end.end()
        else:
            kept.append(text[pos:])
            return "".join(kept), thinking, False


def private_thought(text: str, *, max_chars: int) -> str:
    """The model's private thought in a reply: its reasoning and what precedes the footer.

    Reasoning blocks come first, then the visible text before the footer (all
    of it when there is no footer). The footer and the body are never part of
    it, nor are footer tags anywhere in it. Whitespace runs are folded; past
    `max_chars` the beginning is cut, since a thought ends with what it concluded.
    """
    visible, thinking, _ = _split_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = _FENCE_LINE.sub("", visible).split("\n")
    start = _footer_start(lines)
    before = lines if start is None else lines[:start]
    return fold_thought(" ".join([*thinking, *before]), max_chars=max_chars)


class ReplyParts(NamedTuple):
    """A reply cut where the parser cuts it, for showing it: thinking, footer lines, body."""

    thinking: str
    footer: str
    body: str


def split_reply(text: str) -> ReplyParts:
    """Split a raw reply into its thinking, its footer's tag lines and the body after them.

    Nothing is folded or dropped but the reasoning tags themselves, so a reader
    sees the reply as the model wrote it. Without a footer, all of it is thinking.
    """
    visible, thinking, _ = _split_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = visible.split("\n")
    start = _footer_start(lines)
    reasoning = [block.strip() for block in thinking if block.strip()]
    if start is None:
        return ReplyParts("\n\n".join([*reasoning, visible.strip()]).strip(), "", "")
    last = next(i for i in reversed(range(len(lines))) if _leading_tags(lines[i]))
    before = "\n".join(lines[:start]).strip()
    footer = "\n".join(line for line in lines[start : last + 1] if line.strip())
    body = "\n".join(lines[last + 1 :]).strip()
    return ReplyParts("\n\n".join(p for p in [*reasoning, before] if p), footer, body)


def _says_nothing(text: str) -> bool:
    return text.strip(_NOTHING_PUNCT).strip().lower() in _NOTHING


def _tags_in(text: str) -> list[_Tag]:
    found = (_as_tag(match) for match in _TAG.finditer(text))
    return [tag for tag in found if tag is not None]


def _as_tag(match: re.Match[str]) -> _Tag | None:
    kind = _KIND_BY_KEY.get(match["key"].strip().lower())
    return None if kind is None else _Tag(kind, match["value"].strip().lower())


def _leading_tags(line: str) -> tuple[list[_Tag], str] | None:
    """Split a line that starts with footer tags into its tags and the text after them."""
    tags: list[_Tag] = []
    pos = _skip(_LINE_PREFIX, line, 0)
    while (match := _TAG.match(line, pos)) is not None:
        tag = _as_tag(match)
        if tag is None:
            break
        tags.append(tag)
        pos = _skip(_TAG_SEPARATOR, line, match.end())
    return (tags, line[pos:]) if tags else None


def _skip(pattern: re.Pattern[str], line: str, pos: int) -> int:
    match = pattern.match(line, pos)
    return pos if match is None else match.end()


def _footer_start(lines: list[str]) -> int | None:
    """The index of the footer's first line: the start of the last run of tag lines."""
    last = next((i for i in reversed(range(len(lines))) if _leading_tags(lines[i])), None)
    if last is None:
        return None
    start = last
    for index in range(last - 1, -1, -1):
        if not lines[index].strip():
            continue
        if _leading_tags(lines[index]) is None:
            break
        start = index
    return start


def _find_footer(lines: list[str]) -> tuple[list[_Tag], str] | None:
    """Find the last run of tag lines and return its tags and the body after it."""
    last = next((i for i in reversed(range(len(lines))) if _leading_tags(lines[i])), None)
    if last is None:
        return None
    footer_tags, rest = _leading_tags(lines[last]) or ([], "")
    # Text after the tags on the last tag line starts the body ("[我决定:push] 早上好");
    # trailing text on earlier tag lines is dropped, since it sits before the footer ends.
    for index in range(last - 1, -1, -1):
        if not lines[index].strip():
            continue
        earlier = _leading_tags(lines[index])
        if earlier is None:
            break
        footer_tags = earlier[0] + footer_tags
    body = "\n".join([_BODY_LEAD.sub("", rest, count=1), *lines[last + 1 :]])
    return footer_tags, body


def _values(tags: Iterable[_Tag], kind: str) -> list[str]:
    return [tag.value for tag in tags if tag.kind == kind]


def _decision_class(value: str) -> str | None:
    if value == PUSH:
        return PUSH
    return NO_PUSH if value in _NO_PUSH_SPELLINGS else None


def _read_decision(footer: list[_Tag], everywhere: list[_Tag]) -> tuple[bool, str | None]:
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


def _resolve_urgency(footer: list[_Tag], everywhere: list[_Tag], problems: list[str]) -> Urgency:
    written = _values(footer, "urgency")
    if not written:
        return Urgency.ROUTINE
    seen = set(written) | {v for v in _values(everywhere, "urgency") if v in URGENCY_VALUES}
    # Disagreement or a value we cannot read lowers to routine; it is never guessed upwards.
    if len(seen) == 1 and written[0] in URGENCY_VALUES:
        return Urgency(written[0])
    problems.append(URGENCY_UNCLEAR)
    return Urgency.ROUTINE


def _resolve_channel(footer: list[_Tag], everywhere: list[_Tag], problems: list[str]) -> str | None:
    written = _values(footer, "channel")
    if not written:
        return None
    seen = set(written) | {v for v in _values(everywhere, "channel") if _plausible_channel(v)}
    if len(seen) == 1 and written[0] == AUTO_CHANNEL:
        return None
    if len(seen) == 1 and _plausible_channel(written[0]):
        return written[0]
    problems.append(CHANNEL_UNCLEAR)
    return None


def _plausible_channel(value: str) -> bool:
    return value == AUTO_CHANNEL or _CHANNEL_NAME.fullmatch(value) is not None
