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
from dataclasses import dataclass, field
from enum import Enum

from backthink.models import ModelMessage, ModelReply, ToolUse
from backthink.ports import ModelClient
from backthink.tools import ToolBox

CALL_LIMIT_RESULT = "error: the call limit of this round is reached; write your answer now"


class Stop(Enum):
    """Why a loop ended without a usable final reply."""

    TOOL_LIMIT = "tool_limit"
    OWNER_ACTIVE = "owner_active"


@dataclass
class LoopResult:
    """What the loop ended with: the final reply (costs summed over every turn), or a stop."""

    reply: ModelReply | None
    uses: list[ToolUse] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    """Every tool result as its tool wrote it, for the echo guard."""
    stop: Stop | None = None
    turns: int = 0


async def run_tool_loop(
    model: ModelClient,
    messages: Sequence[ModelMessage],
    box: ToolBox,
    result: LoopResult,
    *,
    max_steps: int,
    max_calls: int,
    owner_spoke: Callable[[], Awaitable[bool]],
) -> LoopResult:
    """Run the model with the tools of `box` until it answers in text or a bound runs out.

    Fills and returns `result`, so the calls made so far are known even when
    a later turn raises.

    Raises:
        ModelError: as `ModelClient.complete` (a refusal of tools included);
            the costs of earlier turns are then lost with the round's reply.
    """
    conversation = list(messages)
    definitions = [spec.definition() for spec in box.specs]
    steps = calls = 0
    prompt = completion = 0
    latency = 0.0
    counted = False
    while True:
        offer = definitions if steps < max_steps and calls < max_calls else []
        reply = await model.complete(conversation, tools=offer)
        result.turns += 1
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
            result.reply = summed
            return result
        if not offer:
            result.reply = summed
            result.stop = Stop.TOOL_LIMIT
            return result
        steps += 1
        conversation.append(
            ModelMessage(role="assistant", text=reply.text, tool_calls=reply.tool_calls)
        )
        allowed = reply.tool_calls[: max(max_calls - calls, 0)]
        calls += len(allowed)
        ran = await asyncio.gather(*(box.run(call) for call in allowed))
        for call, outcome in zip(allowed, ran, strict=True):
            result.uses.append(outcome.use)
            result.results.append(outcome.outside)
            conversation.append(ModelMessage(role="tool", text=outcome.text, tool_call_id=call.id))
        for call in reply.tool_calls[len(allowed) :]:
            # Every call needs an answer, or the endpoint refuses the next request.
            conversation.append(
                ModelMessage(role="tool", text=CALL_LIMIT_RESULT, tool_call_id=call.id)
            )
        if await owner_spoke():
            result.reply = summed
            result.stop = Stop.OWNER_ACTIVE
            return result
