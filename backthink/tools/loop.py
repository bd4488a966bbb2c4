"""The bounded tool loop of a round: call the model, run the tools it asks for, repeat.

The loop ends with a reply that has text and no tool calls: its text carries
the footer and is parsed exactly like a reply of a round without tools. It is
bounded four ways: `max_steps` model turns that may call tools, `max_calls`
calls in all, each call within the tool box's timeout, and the request's
characters (`prompt.max_chars`), which every step fits. When a bound runs out
the model gets one last turn with no tools offered; a reply that still asks
for tools ends the round `suppressed/tool_limit`. Between two steps the loop
asks whether the owner wrote meanwhile; if so it stops (`owner_active`): the
live conversation takes over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from backthink.errors import ModelError, ToolsRefusedError
from backthink.ports import ModelClient
from backthink.records import ModelMessage, ModelReply, ToolCall, ToolUse
from backthink.tools import ToolBox
from backthink.tools.room import REFUSALS_SHOWN, fit_step, size

CALL_LIMIT_RESULT = "error: the call limit of this round is reached; write your answer now"


class Stop(Enum):
    """Why a loop ended without a usable final reply."""

    TOOL_LIMIT = "tool_limit"
    OWNER_ACTIVE = "owner_active"


@dataclass(frozen=True)
class LoopResult:
    """What the loop ended with: the final reply (costs summed over every turn), or why not."""

    reply: ModelReply | None
    uses: tuple[ToolUse, ...] = ()
    results: tuple[str, ...] = ()
    """Every tool result as its tool wrote it, for the echo guard."""
    stop: Stop | None = None
    error: ModelError | None = None
    """The endpoint failed on a turn; the calls made before it stay counted."""


async def run_tool_loop(
    model: ModelClient,
    messages: Sequence[ModelMessage],
    box: ToolBox,
    *,
    max_steps: int,
    max_calls: int,
    owner_spoke: Callable[[], Awaitable[bool]],
    on_use: Callable[[ToolUse], None] = lambda use: None,
    max_chars: int | None = None,
) -> LoopResult:
    """Run the model with the tools of `box` until it answers in text or a bound runs out.

    `on_use` hears of each call as it ends, so a round cut off in the middle
    still knows the calls it made. With `max_chars`, every request stays
    within it (or within the first request's size, if that is larger): each
    step is cut to the room left (see `backthink.tools.room`), and once no
    answer fits, the model gets its last call with no tools offered.

    Raises:
        ToolsRefusedError: the endpoint refused the tool definitions (on the first turn).
    """
    conversation = list(messages)
    used = sum(size(message) for message in conversation)
    limit = used if max_chars is None else max(max_chars, used)
    room_left = True
    uses: list[ToolUse] = []
    results: list[str] = []
    steps = calls = 0
    prompt = completion = 0
    latency = 0.0
    counted = False
    while True:
        more = steps < max_steps and calls < max_calls and room_left
        # Asked again at every step: a search may have brought more tools into the
        # offer, and a server that stopped is no longer offered.
        offer = box.definitions() if more else []
        try:
            reply = await model.complete(conversation, tools=offer)
        except ToolsRefusedError:
            raise
        except ModelError as exc:
            return LoopResult(None, tuple(uses), tuple(results), error=exc)
        if reply.prompt_tokens is not None or reply.completion_tokens is not None:
            counted = True
            prompt += reply.prompt_tokens or 0
            completion += reply.completion_tokens or 0
        latency += reply.latency_ms
        summed = reply.model_copy(
            update={
                "prompt_tokens": prompt if counted else None,
                "completion_tokens": completion if counted else None,
                "latency_ms": latency,
            }
        )
        if not reply.tool_calls:
            return LoopResult(summed, tuple(uses), tuple(results))
        if not offer:
            return LoopResult(summed, tuple(uses), tuple(results), Stop.TOOL_LIMIT)
        steps += 1
        allowed = reply.tool_calls[: max(max_calls - calls, 0)]
        calls += len(allowed)
        ran = await asyncio.gather(*(box.run(call) for call in allowed))
        answers: list[tuple[ToolCall, str]] = []
        for call, outcome in zip(allowed, ran, strict=True):
            uses.append(outcome.use)
            on_use(outcome.use)
            results.append(outcome.outside)
            answers.append((call, outcome.text))
        # Every call of the turn needs an answer, or the endpoint refuses the next
        # request: a few calls past the limit are refused, the rest cut from the turn.
        refused = reply.tool_calls[len(allowed) : len(allowed) + REFUSALS_SHOWN]
        answers += [(call, CALL_LIMIT_RESULT) for call in refused]
        step = fit_step(reply.text, answers, room=limit - used) if limit > used else None
        if step is None:
            room_left = False  # the request is full: the model answers from what it has
        else:
            conversation.extend(step)
            used += sum(size(message) for message in step)
        if await owner_spoke():
            return LoopResult(summed, tuple(uses), tuple(results), Stop.OWNER_ACTIVE)
