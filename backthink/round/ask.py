"""The model step of a round: one plain call, or the bounded tool loop, ending in one reply.

It never raises for the endpoint's failures: an `Asked` ends in exactly one
of a reply (`Replied`), a stop short of one (`Stopped`, with the last reply
and its cost), or the endpoint's error (`Errored`), with the notes the
round's record should carry. The tool calls made on the way go to the
round's own list as each ends (`on_use`), so a round cut off in the middle
still records them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime

import structlog

from backthink.config import ToolsSettings
from backthink.errors import ModelError, ToolsRefusedError
from backthink.ports import ModelClient
from backthink.records import ModelReply, ToolUse
from backthink.round.request import Request
from backthink.tools.loop import LoopResult, Stop, run_tool_loop
from backthink.tools.offer import ToolOffer

log = structlog.get_logger(__name__)

NO_TEXT_ONLY_CALLS = "model endpoint returned no usable reply: no text content, only tool calls"
NO_REPLY = "model endpoint returned no usable reply"


@dataclass(frozen=True)
class Replied:
    """The model answered in text: the reply the round reads (costs summed over every turn)."""

    reply: ModelReply


@dataclass(frozen=True)
class Stopped:
    """The tool loop stopped short of a final reply: the last reply (with its cost), and why."""

    reply: ModelReply
    stop: Stop


@dataclass(frozen=True)
class Errored:
    """The endpoint failed: there is no reply to read."""

    error: ModelError


StepEnd = Replied | Stopped | Errored
"""How a model step ended: exactly one of a reply, a stop, or an error."""


@dataclass(frozen=True)
class Asked:
    """What the model step ended with, and what the round's record keeps of it."""

    end: StepEnd
    results: tuple[str, ...] = ()
    """Every tool result as its tool wrote it: untrusted text for the echo guard."""
    notes: tuple[str, ...] = ()
    """The tool offer's notes, then the reply's."""
    offered: tuple[str, ...] = ()
    """The names of the tools the round offered, as offered."""

    @property
    def reply(self) -> ModelReply | None:
        """The reply the model step ended with (a stopped step has one too); None on an error."""
        return None if isinstance(self.end, Errored) else self.end.reply


async def ask(
    model: ModelClient,
    request: Request,
    offer: ToolOffer,
    settings: ToolsSettings,
    *,
    owner_id: str,
    round_id: str,
    started: datetime,
    owner_spoke: Callable[[], Awaitable[bool]],
    on_use: Callable[[ToolUse], None],
    max_chars: int | None = None,
) -> Asked:
    """Get the round's final reply: plainly, or with tools when the round offers them.

    An endpoint that refuses tool definitions is answered with one plain call,
    and is offered none for a day. With tools, every request stays within
    `max_chars` (`prompt.max_chars`) whatever the model asks for.
    """
    if not offer.enabled or await offer.refused():
        return _asked(await _plain(model, request))
    async with AsyncExitStack() as stack:
        box, notes = await offer.open(owner_id, round_id, stack)
        offered = tuple(spec.name for spec in box.specs)
        try:
            looped = await run_tool_loop(
                model,
                request.messages,
                box,
                max_steps=settings.max_steps,
                max_calls=settings.max_calls,
                owner_spoke=owner_spoke,
                on_use=on_use,
                max_chars=max_chars,
            )
        except ToolsRefusedError as exc:
            log.warning("round.tools_refused")
            await offer.refuse(started)
            notes.append(f"tools_refused: {exc}; plain rounds for a day")
            return _asked(await _plain(model, request), notes=(*notes, *box.notes))
    return _asked(_loop_end(looped), looped.results, (*notes, *box.notes), offered)


def _asked(
    end: StepEnd,
    results: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    offered: tuple[str, ...] = (),
) -> Asked:
    """The model step's value: its end, and its notes followed by its reply's."""
    reply = None if isinstance(end, Errored) else end.reply
    return Asked(end, results, (*notes, *(reply.notes if reply else ())), offered)


def _loop_end(looped: LoopResult) -> StepEnd:
    """The loop's result as exactly one of reply, stop, or error."""
    if looped.reply is None:
        # The loop returns no reply only with the error that ended it.
        return Errored(looped.error or ModelError(NO_REPLY))
    if looped.stop is not None:
        return Stopped(looped.reply, looped.stop)
    return Replied(looped.reply)


async def _plain(model: ModelClient, request: Request) -> StepEnd:
    try:
        reply = await model.complete(request.messages)
    except ModelError as exc:
        return Errored(exc)
    if reply.tool_calls and not reply.text.strip():
        # No tools were offered at all: a reply of nothing but calls says nothing.
        return Errored(ModelError(NO_TEXT_ONLY_CALLS))
    return Replied(reply)
