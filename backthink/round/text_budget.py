"""The request's text budget: long messages are cut, the oldest history goes first.

Pure functions over plain data. The budget counts characters of message text,
the unit the configuration speaks in and the one every tokenizer grows with;
images are not text and are bounded where they enter (the importer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backthink.models import Language, Message
from backthink.records import ModelMessage

_CUT_MARKER: dict[Language, str] = {
    "zh": "…[截断：还有 {} 个字符]",
    "en": "…[cut: {} more characters]",
}


def cut_text(text: str, limit: int, language: Language) -> tuple[str, bool]:
    """Keep the first `limit` characters and say how many were cut; True when it cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + _CUT_MARKER[language].format(len(text) - limit), True


@dataclass(frozen=True)
class Fitted:
    """The history that fits the budget: its model messages and what was cut or dropped."""

    messages: list[ModelMessage]
    kept: list[Message]
    dropped: int
    cut: int

    @property
    def note(self) -> str | None:
        """``history_trimmed: dropped N oldest, cut M`` when anything changed, else None."""
        if not self.dropped and not self.cut:
            return None
        return f"history_trimmed: dropped {self.dropped} oldest, cut {self.cut}"


Render = Callable[[Sequence[Message]], list[ModelMessage]]


def fit_history(
    recent: Sequence[Message],
    *,
    budget: int,
    message_chars: int,
    language: Language,
    render: Render,
) -> Fitted:
    """Cut each message to `message_chars`, then drop the oldest until `render` fits `budget`.

    `render` turns stored messages into model messages (attribution included), so
    the notes it adds are counted and always match the messages that stay: a note
    about a dropped message goes with it.

    Args:
        recent: the window, oldest first.
        budget: characters the rendered history may take; may be zero or less.
        message_chars: characters one message keeps before it is cut.
        language: the language of the cut marker.
        render: stored messages -> model messages.
    """
    window: list[Message] = []
    for message in recent:
        text, was_cut = cut_text(message.text, message_chars, language)
        window.append(message.model_copy(update={"text": text}) if was_cut else message)
    start = 0
    while True:
        rendered = render(window[start:])
        excess = _chars(rendered) - max(budget, 0)
        if excess <= 0 or start == len(window):
            break
        # Drop at least one message, and as many of the oldest as the excess needs;
        # the loop renders again, since notes may come and go with them.
        while start < len(window):
            excess -= len(window[start].text)
            start += 1
            if excess <= 0:
                break
    kept = window[start:]
    # Only the cut messages that stay count as cut: a dropped one was not shown at all.
    cut_kept = sum(1 for old, new in zip(recent[start:], kept, strict=True) if old is not new)
    return Fitted(messages=rendered, kept=kept, dropped=start, cut=cut_kept)


def _chars(messages: Sequence[ModelMessage]) -> int:
    return sum(len(m.text) for m in messages)
