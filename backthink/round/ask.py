"""The model step of a round: one plain call, or the bounded tool loop, ending in one reply.

It never raises for the endpoint's failures: an `Asked` says what came back
(a reply, a stop, or the error), with the tool calls made on the way and the
notes the round's record should carry.
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
from backthink.tools.loop import Stop, run_tool_loop
from backthink.tools.offer import ToolOffer

log = structlog.get_logger("backthink.round")

NO_TEXT_ONLY_CALLS = "model endpoint returned no usable reply: no text content, only tool calls"


@dataclass(frozen=True)
class Asked:
    """What the model step ended with."""

    reply: ModelReply | None
    stop: Stop | None = None
    error: ModelError | None = None
    uses: tuple[ToolUse, ...] = ()
    results: tuple[str, ...] = ()
    """Every tool result as its tool wrote it: untrusted text for the echo guard."""
    notes: tuple[str, ...] = ()
    offered: tuple[str, ...] = ()
    """The names of the tools the round offered, as offered."""


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
        return await _plain(model, request)
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
            plain = await _plain(model, request)
            return Asked(plain.reply, error=plain.error, notes=(*notes, *box.notes))
    return Asked(
        looped.reply,
        looped.stop,
        looped.error,
        looped.uses,
        looped.results,
        notes=(*notes, *box.notes),
        offered=offered,
    )


async def _plain(model: ModelClient, request: Request) -> Asked:
    try:
        reply = await model.complete(request.messages)
    except ModelError as exc:
        return Asked(None, error=exc)
    if reply.tool_calls and not reply.text.strip():
        # No tools were offered at all: a reply of nothing but calls says nothing.
        return Asked(None, error=ModelError(NO_TEXT_ONLY_CALLS))
    return Asked(reply)
