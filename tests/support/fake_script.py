"""What the fake endpoint answers: script items, their JSON form, and rough token counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RETRY_NOW_S = 0.001  # seconds; the SDK treats 0 as "no hint" and backs off ~0.5 s instead
CHARS_PER_TOKEN = 4  # a rough count is enough for usage figures


@dataclass(frozen=True)
class Reply:
    """Answer with this text, optionally after a delay and with a reasoning field beside it."""

    text: str
    delay_s: float = 0.0
    reasoning: str | None = None
    usage: bool = True
    stream_delay_s: float = 0.0
    """Seconds between the pieces of a streamed answer."""


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error status.

    `retry_after_s` becomes the `retry-after-ms` and `retry-after` headers (None sends
    neither). The default is tiny so the SDK retries at once instead of backing off.
    `message` goes into the error body, e.g. to echo what a real server might.
    """

    status: int = 500
    retry_after_s: float | None = RETRY_NOW_S
    delay_s: float = 0.0
    message: str = "scripted failure"


@dataclass(frozen=True)
class Malformed:
    """Answer 200 with a body that is not JSON although it says it is."""

    body: str = '{"choices": [oops'
    delay_s: float = 0.0


@dataclass(frozen=True)
class EmptyChoices:
    """Answer 200 with a well-formed completion that has no choices."""

    delay_s: float = 0.0


@dataclass(frozen=True)
class NullContent:
    """Answer 200 with one choice whose message content is null."""

    reasoning: str | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class ToolCalls:
    """Answer with tool calls: (name, arguments) pairs; arguments given as text are sent as is.

    `text` goes into the content beside the calls (None sends null, as most servers do).
    """

    calls: tuple[tuple[str, Any], ...]
    text: str | None = None
    delay_s: float = 0.0


ScriptItem = Reply | Fail | Malformed | EmptyChoices | NullContent | ToolCalls


def item_from_json(value: Any) -> ScriptItem:
    """Build a script item from its JSON form (a replies-file line or a control request).

    Accepted forms: ``"text"``; ``{"text": ..., "delay_s": ..., "reasoning": ...}``;
    ``{"status": 500, "retry_after_s": ...}``; ``{"malformed": true}``;
    ``{"empty_choices": true}``; ``{"null_content": true}``;
    ``{"tool_calls": [["name", {...}], ...], "content": ...}``. Any of them may carry
    ``delay_s``.

    Raises:
        ValueError: the value is none of these.
    """
    if isinstance(value, str):
        return Reply(value)
    if not isinstance(value, dict):
        raise ValueError(f"script item must be a string or an object, not {value!r}")
    delay_s = float(value.get("delay_s", 0.0))
    if "text" in value:
        return Reply(
            str(value["text"]),
            delay_s=delay_s,
            reasoning=value.get("reasoning"),
            usage=bool(value.get("usage", True)),
        )
    if "status" in value:
        retry = value.get("retry_after_s", RETRY_NOW_S)
        return Fail(
            int(value["status"]),
            None if retry is None else float(retry),
            delay_s,
            str(value.get("message", "scripted failure")),
        )
    if value.get("malformed"):
        return Malformed(delay_s=delay_s)
    if value.get("empty_choices"):
        return EmptyChoices(delay_s=delay_s)
    if value.get("null_content"):
        return NullContent(reasoning=value.get("reasoning"), delay_s=delay_s)
    if "tool_calls" in value:
        calls = tuple((str(name), args) for name, args in value["tool_calls"])
        return ToolCalls(calls, value.get("content"), delay_s)
    raise ValueError(f"unknown script item {value!r}")


def load_replies(path: Path) -> list[ScriptItem]:
    """Read a replies file: one JSON script item per line; blank lines and # comments skipped."""
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            items.append(item_from_json(json.loads(line)))
    return items


def rough_tokens(text: str) -> int:
    """Count tokens the way a fake may: about four characters each, at least one."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def message_text(message: Any) -> str:
    """Return the text of a chat message, whether its content is a string or a list of parts."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
