"""The parallel notice: what a relay turn is told of the owner's other turns in flight (pure).

When the owner sends several messages at once (a phone and a laptop, a
double send), each relay turn would answer as if it were alone, and all of
them might answer the same thing. A turn that starts while others of the
same owner are in flight gets one extra `system` message at the end of the
request it forwards: the fixed first and last lines of
`backthink.protocol.PARALLEL_NOTICE`, and between them one line per other
turn (the oldest `MAX_DESCRIBED`), holding only metadata: its client message
id when the front-end sent one, how far it got, the tools it called; and how
many more turns wait. Never the other turn's text: half an answer would
invite this turn to finish or race it. The notice is a snapshot taken when
the turn arrives, is never stored, and never goes inside a user or
assistant message.

Client message ids and tool names are outside text: only short names of
letters, digits and `._:-` are shown, so nothing in them can read as an
instruction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from backthink.host.turns import Stage, TurnView
from backthink.models import Language
from backthink.protocol import PARALLEL_NOTICE

MAX_DESCRIBED = 3  # other turns described one line each; the rest are counted
MAX_NAME_CHARS = 64  # a client message id or tool name longer than this is left out
CLIENT_ID_HEADERS = ("x-backthink-message", "x-openwebui-message-id")
"""Where a front-end says which message a turn answers: ours first, then Open WebUI's own."""
_NAME = re.compile(r"[A-Za-z0-9._:-]+")

_WORDS: Mapping[Language, Mapping[str, str]] = {
    "zh": {
        "turn": "另一路：",
        "sep": "；",
        "end": "。",
        "id": "消息 id {id}",
        Stage.QUEUED: "尚未开始",
        Stage.WAITING: "正在等待模型作答",
        Stage.STREAMING: "正在作答，已输出 {chars} 字",
        "tools": "已调用工具：{tools}",
        "join": "、",
        "more": "另有 {count} 路在等待。",
    },
    "en": {
        "turn": "Other turn: ",
        "sep": "; ",
        "end": ".",
        "id": "message id {id}",
        Stage.QUEUED: "not started yet",
        Stage.WAITING: "waiting for the model's answer",
        Stage.STREAMING: "answering, {chars} characters so far",
        "tools": "tools called: {tools}",
        "join": ", ",
        "more": "{count} more turn(s) of this conversation wait as well.",
    },
}


def safe_name(value: object) -> str | None:
    """A client message id or tool name fit to show the model, or None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        return None
    return value if _NAME.fullmatch(value) else None


def client_message_id(headers: Mapping[str, str]) -> str | None:
    """The turn's client message id from its request headers, when one is given and fit to show."""
    for name in CLIENT_ID_HEADERS:
        found = safe_name(headers.get(name))
        if found is not None:
            return found
    return None


def tools_called(messages: Sequence[Any]) -> list[str]:
    """Names of the tools the turn's assistant called after the owner's newest message."""
    names: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "user":
            break
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            name = safe_name(function.get("name")) if isinstance(function, Mapping) else None
            if name is not None and name not in names:
                names.append(name)
    return names


def notice(alongside: Sequence[TurnView], language: Language) -> str | None:
    """The notice for a turn that arrived beside `alongside` (oldest first); None when alone."""
    if not alongside:
        return None
    frame = PARALLEL_NOTICE[language]
    lines = [frame.first]
    lines += [_line(turn, language) for turn in alongside[:MAX_DESCRIBED]]
    if len(alongside) > MAX_DESCRIBED:
        lines.append(_WORDS[language]["more"].format(count=len(alongside) - MAX_DESCRIBED))
    lines.append(frame.last)
    return "\n".join(lines)


def _line(turn: TurnView, language: Language) -> str:
    """One other turn: its id when known, its stage, the tools it called."""
    words = _WORDS[language]
    parts = []
    client_id = safe_name(turn.client_id)
    if client_id is not None:
        parts.append(words["id"].format(id=client_id))
    parts.append(words[turn.stage].format(chars=turn.chars))
    tools = [name for name in turn.tools if safe_name(name) is not None]
    if tools:
        parts.append(words["tools"].format(tools=words["join"].join(tools)))
    return words["turn"] + words["sep"].join(parts) + words["end"]


def with_notice(messages: Sequence[Any], text: str) -> list[Any]:
    """The request's messages with the notice as one system message of its own at the end."""
    return [*messages, {"role": "system", "content": text}]
