"""The fixed tokens of backthink's protocol: footer tags and the request's own markers.

They are shared with the original system and with the models that learned
them, so they are kept byte for byte; the parsers and the prompts read them
from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from backthink.models import Language, Urgency


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

# The two attribution markers begin the system notes that say who is speaking.
ROLE_CONTEXT_MARKER: Final = "[会话角色] "
SPEAKER_SWITCH_MARKER: Final = "[发言归属] "

TIME_MARKER: Final[Mapping[Language, str]] = MappingProxyType({"zh": "[时间] ", "en": "[time] "})
"""How a time note begins: a system message of its own, never inside a message body."""


class NoticeLines(NamedTuple):
    """The fixed first and last lines of the parallel notice in one prompt language."""

    first: str
    last: str


PARALLEL_NOTICE: Final[Mapping[Language, NoticeLines]] = MappingProxyType(
    {
        "zh": NoticeLines(
            "[并行路提示] 该会话当前另有一路正在进行中（不打断它）。",
            "你这一路独立作答；不要复述或改写对方可能给出的内容。",
        ),
        "en": NoticeLines(
            "[Parallel turn] Another turn of this conversation is in progress "
            "(it is not interrupted).",
            "Answer this turn on its own; do not repeat or rewrite what the other turn may say.",
        ),
    }
)
"""The parallel notice's frame: a relay turn begun beside another of the same owner is told so
in one system message of its own at the end of the forwarded request; its middle lines (the
other turns' metadata, never their text) are `backthink.api.parallel`'s."""
