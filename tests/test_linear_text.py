"""Outside text is read in linear time: no pattern backtracks over what a stranger typed.

Two kinds of test. The tag scanner must find exactly the tags the former
pattern found, on short generated strings (where the pattern is still fast).
And every reader of outside text (tags, footer, reasoning blocks, the echo
guard, redaction, the journal's folding) must take time in proportion to a
text's length on generated adversarial strings of up to 10,000 characters:
each is timed against the same function on ordinary text of the same size,
so the bound holds on a slow machine as on a fast one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backthink.decision import tags
from backthink.decision.echo import reject_echo
from backthink.decision.footer import parse_footer, without_fences, without_trailing_fence
from backthink.decision.inert import defuse, inert
from backthink.decision.reasoning import fold_thought, split_thinking
from backthink.decision.reply import read_reply
from backthink.models import Decision
from backthink.redact import redact_urls

# The pattern tags were read with before the scanner, kept here as its specification.
_FORMER_TAG = re.compile(
    r"[\[【][^\S\n]*(?P<key>[^\[\]【】:：\n]{1,24}?)[^\S\n]*[:：]"
    r"[^\S\n]*(?P<value>[^\[\]【】\n]{0,80}?)[^\S\n]*[\]】]"
)
_FORMER_PREFIX = re.compile(r"[\s>*_•·`+-]*")
_FORMER_SEPARATOR = re.compile(r"[\s*_,，、;；|`]*")


def _former_tag(match: re.Match[str]) -> tags.Tag | None:
    kind = tags._KIND_BY_KEY.get(match["key"].strip().lower())
    return None if kind is None else tags.Tag(kind, match["value"].strip().lower())


def _former_tags_in(text: str) -> list[tags.Tag]:
    found = (_former_tag(m) for m in _FORMER_TAG.finditer(text))
    return [tag for tag in found if tag is not None]


def _former_without(text: str) -> str:
    return _FORMER_TAG.sub(lambda m: " " if _former_tag(m) is not None else m[0], text)


def _former_without_nested(text: str) -> str:
    while True:
        stripped = _former_without(text)
        if stripped == text:
            return text
        text = stripped


def _former_leading(line: str) -> tuple[list[tags.Tag], str] | None:
    found: list[tags.Tag] = []
    prefix = _FORMER_PREFIX.match(line, 0)
    pos = prefix.end() if prefix else 0
    while (match := _FORMER_TAG.match(line, pos)) is not None:
        tag = _former_tag(match)
        if tag is None:
            break
        found.append(tag)
        separator = _FORMER_SEPARATOR.match(line, match.end())
        pos = separator.end() if separator else match.end()
    return (found, line[pos:]) if found else None


# Pieces that matter to the grammar, so short strings hit its corners often.
_PIECES = [
    *"[]【】:：\n \t\u3000\r>*-,|`",
    "我决定",
    "decision",
    "urgency",
    "紧急",
    "渠道",
    "push",
    "no_push",
    "critical",
    "x",
    "好",
    " " * 5,
]
SHORT = st.lists(st.sampled_from(_PIECES), max_size=16).map("".join)
SAME = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SAME
@given(SHORT)
def test_the_scanner_finds_the_tags_the_former_pattern_found(text: str) -> None:
    """tags_in, has_tags and without_tags agree with the former pattern on any short text."""
    assert tags.tags_in(text) == _former_tags_in(text)
    assert tags.has_tags(text) == bool(_former_tags_in(text))
    assert tags.without_tags(text) == _former_without(text)


@SAME
@given(SHORT)
def test_nested_tags_go_as_repeated_removal_took_them(text: str) -> None:
    """One pass removes what repeating without_tags until nothing changed removed."""
    assert tags.without_nested_tags(text) == _former_without_nested(text)


@SAME
@given(SHORT)
def test_a_line_starting_with_tags_splits_as_before(text: str) -> None:
    """leading_tags splits a line into the same tags and rest as the former pattern."""
    line = text.split("\n")[0]
    assert tags.leading_tags(line) == _former_leading(line)


def test_a_trailing_fence_goes_as_before() -> None:
    """The run of backticks or tildes that ends a body is removed, and only such a run."""
    assert without_trailing_fence("早安\n```") == "早安\n"
    assert without_trailing_fence("a ``` ```") == "a ``` "
    assert without_trailing_fence("~~~```") == "~~~"
    assert without_trailing_fence("x``") == "x``"
    assert without_trailing_fence("x ~~~~  \n") == "x "


# ---- time ------------------------------------------------------------------------

MAX_CHARS = 10_000
# A linear reader may be this many times slower per character on adversarial text than
# on ordinary text (a line per character, other branches taken); a backtracking one was
# a million times slower at two hundred characters, a quadratic one thousands of times
# slower at ten thousand.
SLOWER = 100.0
FLOOR_CHARS = MAX_CHARS // 2  # shorter texts are timed as if this long: noise rules below

_ORDINARY = (
    "今天下午三点要去图书馆还书，顺便买杯咖啡。 The meeting moved to Friday, "
    "see https://example.org/notes?id=7 for details. [我决定:no_push]\n好的，晚点再说。 "
)

_ADVERSARIAL_PIECES = [
    "[",
    "【",
    "]",
    "】",
    ":",
    "：",
    " ",
    "\u3000",
    "\n",
    "`",
    "~",
    "<",
    "< think",
    "</",
    ">",
    "我决定",
    "push",
    "a",
    "。",
    "://",
    "=",
    "&",
    "?",
    "sk-",
    "https",
    "{",
    '"',
]
ADVERSARIAL = st.lists(
    st.tuples(st.sampled_from(_ADVERSARIAL_PIECES), st.integers(1, 3_000)), min_size=1, max_size=6
).map(lambda runs: "".join(piece * count for piece, count in runs)[:MAX_CHARS])

Reader = Callable[[str], Any]


def _push(body: str) -> Decision:
    return Decision(push=True, body=body[:600] or "x")


READERS: dict[str, Reader] = {
    "tags_in": tags.tags_in,
    "without_tags": tags.without_tags,
    "without_nested_tags": tags.without_nested_tags,
    "leading_tags": lambda text: [tags.leading_tags(line) for line in text.split("\n")],
    "defuse": defuse,
    "inert": lambda text: inert(text, 400),
    "parse_footer": parse_footer,
    "read_reply_json": lambda text: read_reply(text, output="json_schema", max_body_chars=600),
    "split_thinking": split_thinking,
    "fold_thought": lambda text: fold_thought(tags.without_tags(text), max_chars=400),
    "redact_urls": redact_urls,
    "echo_guard": lambda text: reject_echo(_push(text), [text, text[::-1]]),
}


def _seconds(reader: Reader, text: str) -> float:
    started = time.perf_counter()
    reader(text)
    return time.perf_counter() - started


def _ordinary(chars: int) -> str:
    return (_ORDINARY * (chars // len(_ORDINARY) + 1))[:chars]


def _check_linear(name: str, text: str) -> None:
    """Time `text` against ordinary text of the same length, the two runs side by side.

    Each is the best of a few runs, and the ordinary run is taken right after
    the adversarial one, so a machine busy with other work slows both alike.
    """
    reader = READERS[name]
    ordinary = _ordinary(max(len(text), FLOOR_CHARS))
    took = min(_seconds(reader, text) for _ in range(3))
    normal = min(_seconds(reader, ordinary) for _ in range(3))
    assert took <= SLOWER * normal, (
        f"{name} took {took:.4f} s on {len(text)} characters, "
        f"{took / normal:.0f} times ordinary text's {normal:.4f} s"
    )


@pytest.mark.parametrize("name", list(READERS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ADVERSARIAL)
def test_readers_of_outside_text_take_linear_time(name: str, text: str) -> None:
    """On adversarial text of up to 10,000 characters each reader stays near its ordinary pace."""
    _check_linear(name, text)


@pytest.mark.parametrize("name", list(READERS))
def test_the_message_that_stalled_rounds_reads_at_ordinary_pace(name: str) -> None:
    """`[`, 60 spaces, `:`, 139 spaces, `。`: once 9-17 s inside every round, now ordinary."""
    _check_linear(name, "[" + " " * 60 + ":" + " " * 139 + "。")


@pytest.mark.parametrize("name", list(READERS))
def test_a_fence_line_of_spaces_reads_at_ordinary_pace(name: str) -> None:
    """Three backticks, a long run of spaces, no end to the line: once quadratic, now ordinary."""
    _check_linear(name, "```" + " " * 9_000 + "【")


_FORMER_FENCE_LINE = re.compile(r"^[^\S\n]*(?:`{3,}|~{3,})[^\S\n]*[\w+#.-]*[^\S\n]*$", re.MULTILINE)


@given(
    text=st.lists(
        st.sampled_from(["`", "~", " ", "\t", "\r", "\n", "a", "json", "-", "#", "【", "x y"]),
        max_size=14,
    ).map("".join)
)
def test_fence_lines_go_as_the_former_pattern_took_them(text: str) -> None:
    """The hand reading of fence lines empties exactly the lines the former pattern did."""
    assert without_fences(text) == _FORMER_FENCE_LINE.sub("", text).split("\n")
