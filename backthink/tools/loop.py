"""The bounded tool loop of a round: call the model, run the tools it asks for, repeat.

The loop ends with a reply that has text and no tool calls: its text carries
the footer and is parsed exactly like a reply of a round without tools. It is
bounded three ways: `max_steps` model turns that may call tools, `max_calls`
calls in all, each call within the tool box's timeout. When a bound runs out
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
from backthink.records import ModelMessage, ModelReply, ToolUse
from backthink.tools import ToolBox

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
) -> LoopResult:
    """Run the model with the tools of `box` until it answers in text or a bound runs out.

    `on_use` hears of each call as it ends, so a round cut off in the middle
    still knows the calls it made.

    Raises:
        ToolsRefusedError: the endpoint refused the tool definitions (on the first turn).
    """
    conversation = list(messages)
    uses: list[ToolUse] = []
    results: list[str] = []
    steps = calls = 0
    prompt = completion = 0
    latency = 0.0
    counted = False
    while True:
        # Asked each step: a search may have brought more tools into the offer.
        within = steps < max_steps and calls < max_calls
        offer = [spec.definition() for spec in box.specs] if within else []
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
        conversation.append(
            ModelMessage(role="assistant", text=reply.text, tool_calls=reply.tool_calls)
        )
        allowed = reply.tool_calls[: max(max_calls - calls, 0)]
        calls += len(allowed)
        ran = await asyncio.gather(*(box.run(call) for call in allowed))
        for call, outcome in zip(allowed, ran, strict=True):
            uses.append(outcome.use)
            on_use(outcome.use)
            results.append(outcome.outside)
            conversation.append(ModelMessage(role="tool", text=outcome.text, tool_call_id=call.id))
        for call in reply.tool_calls[len(allowed) :]:
            # Every call needs an answer, or the endpoint refuses the next request.
            conversation.append(
                ModelMessage(role="tool", text=CALL_LIMIT_RESULT, tool_call_id=call.id)
            )
        if await owner_spoke():
            return LoopResult(summed, tuple(uses), tuple(results), Stop.OWNER_ACTIVE)
