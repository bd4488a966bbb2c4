"""Constrained output: the decision as one JSON object, read with the footer's fail-safe rules.

With `model.output = "json_schema"` the request carries an OpenAI-style
`response_format` whose schema holds five string fields: `thought` (the
model's private thinking, kept in the journal and never sent), `decision`
(`push` | `no_push`), `channel`, `urgency` (`routine` | `warning` |
`critical`) and `body`. Servers that honour it (llama.cpp, vLLM, Ollama,
OpenAI) constrain generation to that shape, which is what makes small local
models usable. The reply is still untrusted text: anything that is not
exactly one such object, with every field a string and no other field, is
no push, and an unclear urgency or channel falls back as in the footer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal

from backthink.decision.failsafe import (
    CHANNEL_UNCLEAR,
    DEFAULT_MAX_BODY_CHARS,
    DUPLICATE_FIELD,
    EMPTY_REPLY,
    INVALID_JSON,
    MISSING_FIELD,
    NO_DECISION,
    NOT_AN_OBJECT,
    UNCLOSED_THINK,
    UNKNOWN_FIELD,
    URGENCY_UNCLEAR,
    WRONG_TYPE,
    settle,
)
from backthink.decision.footer import plausible_channel
from backthink.decision.reasoning import Split, split_thinking
from backthink.models import Decision, Urgency
from backthink.protocol import AUTO_CHANNEL, NO_PUSH, PUSH, URGENCY_VALUES

Output = Literal["footer", "json_schema"]

SCHEMA_NAME: Final = "backthink_decision"
# The order is the order a grammar-constrained model writes them in: it thinks
# first, then decides, and writes the message last.
FIELDS: Final = ("thought", "decision", "channel", "urgency", "body")

DECISION_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "thought": {"type": "string"},
            "decision": {"type": "string", "enum": [PUSH, NO_PUSH]},
            "channel": {"type": "string"},
            "urgency": {"type": "string", "enum": list(URGENCY_VALUES)},
            "body": {"type": "string"},
        },
        # Strict structured outputs (OpenAI) need every property required and no others.
        "required": list(FIELDS),
        "additionalProperties": False,
    }
)


SchemaForm = Literal["json_schema", "json_object"]


# Characters of the thought in the llama.cpp form, whose grammar bounds string lengths:
# a small model otherwise muses until max_tokens runs out and never closes the object.
THOUGHT_MAX_CHARS: Final = 100


def decision_schema(channels: Sequence[str] = (), *, bounded: bool = False) -> dict[str, Any]:
    """The schema of the decision object, as plain JSON.

    With `channels`, the channel field is one of them or `auto`, so a model
    cannot ramble there. `bounded` caps the thought's length, for servers
    whose grammar honours maxLength (OpenAI's strict mode does not take it).
    """
    schema: dict[str, Any] = json.loads(json.dumps(dict(DECISION_SCHEMA)))
    if channels:
        names = [*dict.fromkeys(name.lower() for name in channels if name != AUTO_CHANNEL)]
        schema["properties"]["channel"]["enum"] = [*names, AUTO_CHANNEL]
    if bounded:
        schema["properties"]["thought"]["maxLength"] = THOUGHT_MAX_CHARS
    return schema


def response_format(
    form: SchemaForm = "json_schema", *, channels: Sequence[str] = ()
) -> dict[str, Any]:
    """The `response_format` entry of a json_schema request, as plain JSON.

    `json_schema` is the OpenAI form, which OpenAI, vLLM, Ollama and llama.cpp's
    own server read. `json_object` with a `schema` beside it is the older form
    that llama.cpp's server also reads and llama-cpp-python's server reads only;
    both turn it into a grammar, which bounds the thought's length too.
    """
    if form == "json_object":
        return {"type": "json_object", "schema": decision_schema(channels, bounded=True)}
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": decision_schema(channels), "strict": True},
    }


class _DuplicateKeyError(ValueError):
    """The object names a field twice: which value counts is anyone's guess."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _DuplicateKeyError
    return dict(pairs)


def read_object(split: Split) -> tuple[dict[str, str] | None, list[str]]:
    """The reply's five fields, or None and the problems that say why not.

    Args:
        split: the reply with its reasoning blocks cut out.
    """
    problems: list[str] = []
    if split.unclosed:
        problems.append(UNCLOSED_THINK)
    visible = split.visible.strip()
    if not visible:
        return None, [*problems, EMPTY_REPLY]
    try:
        # strict=False lets a raw line break stand inside a string: llama.cpp-family
        # grammars allow it, and it cannot change which field holds what.
        data = json.loads(visible, object_pairs_hook=_no_duplicates, strict=False)
    except _DuplicateKeyError:
        return None, [*problems, DUPLICATE_FIELD]
    except (ValueError, RecursionError):
        # Extra text around the object lands here too: json.loads wants the whole text.
        # Arrays nested a thousand deep exhaust the decoder's stack: no object either.
        return None, [*problems, INVALID_JSON]
    if not isinstance(data, dict):
        return None, [*problems, NOT_AN_OBJECT]
    if set(data) - set(FIELDS):
        return None, [*problems, UNKNOWN_FIELD]
    if set(FIELDS) - set(data):
        return None, [*problems, MISSING_FIELD]
    if not all(isinstance(value, str) for value in data.values()):
        return None, [*problems, WRONG_TYPE]
    return data, problems


def parse_json_reply(text: str, *, max_body_chars: int = DEFAULT_MAX_BODY_CHARS) -> Decision:
    """Read a json_schema reply into a Decision; anything unclear is no push.

    Args:
        text: The raw model reply (reasoning blocks around the object are removed).
        max_body_chars: Longest body that may still be pushed.

    Returns:
        A Decision that pushes only for a well-formed object whose decision is
        `push` and whose body is deliverable; otherwise `problems` says why not.
    """
    data, problems = read_object(split_thinking(text))
    return object_decision(data, problems, max_body_chars=max_body_chars)


def object_decision(
    data: dict[str, str] | None, problems: list[str], *, max_body_chars: int
) -> Decision:
    """The decision of a read object (None: unreadable, with `problems` saying why)."""
    if data is None:
        return Decision(problems=problems)
    decision = data["decision"].strip().lower()
    if decision not in (PUSH, NO_PUSH):
        return Decision(problems=[*problems, NO_DECISION])
    urgency = Urgency.ROUTINE
    written = data["urgency"].strip().lower()
    if written in URGENCY_VALUES:
        urgency = Urgency(written)
    elif written:
        # Unknown or the template copied: never guessed upwards.
        problems.append(URGENCY_UNCLEAR)
    channel: str | None = None
    named = data["channel"].strip().lower()
    if named and named != AUTO_CHANNEL:
        if plausible_channel(named):
            channel = named
        else:
            problems.append(CHANNEL_UNCLEAR)
    return settle(
        decision == PUSH,
        data["body"].strip(),
        problems,
        max_body_chars=max_body_chars,
        channel=channel,
        urgency=urgency,
    )
