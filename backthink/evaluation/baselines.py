"""The baselines: scorers that ask no model, run through the same rounds and the same gate.

`never` stays silent every time; `always` pushes a fixed routine line in the
scenario's language, naming the first expected word when the scenario has one
(never the owner's own words, which the echo guard would refuse). Beside a
model's figures they show what the model adds: the gate alone already holds
back many pushes, so a model is only as good as its lead over `always` on
false alarms and over `never` on recall.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from backthink.decision.structured import Output
from backthink.evaluation.scenarios import Scenario
from backthink.records import ModelMessage, ModelReply

NEVER: Final = "never"
ALWAYS: Final = "always"
NAMES: Final = (NEVER, ALWAYS)

# The always-push line, with and without an expected word to name.
_LINES: Final = {
    "zh": ("想到你了，顺便说一声：{}。", "想到你了，今天过得怎么样？"),
    "en": (
        "Thinking of you, and a quick word about {}.",
        "Thinking of you: how is your day going?",
    ),
}
_FOOTER: Final = {
    "zh": ("[我决定:push]\n[紧急:routine]", "[我决定:no_push]"),
    "en": ("[decision:push]\n[urgency:routine]", "[decision:no_push]"),
}


def baseline_line(scenario: Scenario) -> str:
    """The `always` scorer's message for a scenario: fixed, in its language."""
    named, plain = _LINES[scenario.lang]
    mentions = scenario.expect.mentions
    return named.format(mentions[0]) if mentions else plain


def baseline_reply(name: str, scenario: Scenario, output: Output) -> str:
    """The reply a baseline scorer gives for a scenario, in the configured output form."""
    push = name == ALWAYS
    body = baseline_line(scenario) if push else ""
    if output == "json_schema":
        data = {
            "thought": "",
            "decision": "push" if push else "no_push",
            "channel": "auto",
            "urgency": "routine",
            "body": body,
        }
        return json.dumps(data, ensure_ascii=False)
    pushed, silent = _FOOTER[scenario.lang]
    return f"{pushed}\n{body}" if push else silent


class CannedModel:
    """A model port answering every call with the reply it was last given; no network call."""

    def __init__(self, name: str) -> None:
        self._name = f"baseline:{name}"
        self.answer = ""

    @property
    def model_name(self) -> str:
        """The name recorded with the baseline's rounds."""
        return self._name

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """The canned answer: no tools asked for, no tokens spent."""
        return ModelReply(text=self.answer, model=self._name, latency_ms=0.0)

    async def probe(self) -> str:
        """A canned model always answers."""
        return f"canned model {self._name!r}"
