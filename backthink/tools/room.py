"""The room a round's tool turns take in its request: bounded, whatever the model asks for.

Every step of the tool loop adds to the request it sends next: the model's
turn with its calls, and one answer per call. Left alone, a model that asks
for ten thousand calls in one turn makes the next request carry ten
thousand answers. Here a step is cut to fit the room the request has left
under `prompt.max_chars`: calls past the round's limit get a short refusal
only up to `REFUSALS_SHOWN` of them, the rest are cut from the turn (a turn
must carry exactly the calls that are answered); answers share the room,
each cut with a visible marker; when not even a short answer fits, calls
are cut from the end of the turn, and a step that keeps none is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from backthink.records import ModelMessage, ToolCall
from backthink.tools import MAX_ARGUMENT_CHARS, cut_result

REFUSALS_SHOWN: Final = 4
"""Calls past the limit answered with a refusal, so the model learns of the limit; more are cut."""
MIN_ANSWER_CHARS: Final = 200
"""An answer is never cut below this: a step keeps fewer answers instead."""
TURN_TEXT_CHARS: Final = 2_000
"""Characters of the text beside a turn's calls; it is thinking aloud, not the reply."""
UNREAD_ARGUMENTS: Final = "{}"
"""What stands for arguments refused unread (too long): the request need not carry them."""


def size(message: ModelMessage) -> int:
    """The characters a message adds to a request: its text and its calls."""
    return len(message.text) + sum(
        len(call.id) + len(call.name) + len(call.arguments) for call in message.tool_calls
    )


def fit_step(
    text: str, answers: Sequence[tuple[ToolCall, str]], *, room: int
) -> list[ModelMessage] | None:
    """The model's turn and the answers to its calls, cut to fit `room` characters.

    Args:
        text: the text the model wrote beside its calls.
        answers: each answered call, in the turn's order, with the answer's text.
        room: characters the request may still grow by.

    Returns:
        The assistant message and its tool messages, or None when not one
        answered call fits: the step is then left out of the request.
    """
    text = cut_result(text, TURN_TEXT_CHARS)
    kept = list(answers)
    while kept:
        calls = [_as_sent(call) for call, _ in kept]
        turn = ModelMessage(role="assistant", text=text, tool_calls=calls)
        left = room - size(turn)
        share = left // len(kept)
        if share >= MIN_ANSWER_CHARS or all(len(a) <= share for _, a in kept):
            return [
                turn,
                *(
                    ModelMessage(role="tool", text=cut_result(answer, share), tool_call_id=call.id)
                    for call, answer in kept
                ),
            ]
        kept.pop()
    return None


def _as_sent(call: ToolCall) -> ToolCall:
    """The call as the request repeats it: arguments refused unread are not carried back."""
    if len(call.arguments) <= MAX_ARGUMENT_CHARS:
        return call
    return call.model_copy(update={"arguments": UNREAD_ARGUMENTS})
