"""A round's memory I/O: what it remembers before it asks, and the thought it keeps after.

Memory helps a round but is not needed for one: when it cannot be read or
written, the round goes on without it, with a note saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import structlog

from backthink.config import MemorySettings
from backthink.decision.overlap import quotes
from backthink.errors import StoreError
from backthink.memory.block import MemoryBlock, journal_share
from backthink.models import Memory, MemoryKind, Message, Recalled
from backthink.ports import MemoryStore

log = structlog.get_logger(__name__)


async def recollect(
    memories: MemoryStore | None,
    settings: MemorySettings,
    owner_id: str,
    window: Sequence[Message],
) -> MemoryBlock:
    """The latest thoughts and what the window recalls, within `memory.max_chars`."""
    m = settings
    if memories is None or m.max_chars <= 0 or (m.journal <= 0 and m.recall <= 0):
        return MemoryBlock()
    try:
        thoughts = await memories.latest_thoughts(owner_id, m.journal)
        shown = sum(len(t.text) for t in thoughts)
        left = m.max_chars - min(shown, journal_share(m.max_chars, recall=m.recall))
        recalled = (
            await memories.recall(
                owner_id,
                window,
                limit=m.recall,
                max_chars=left,
                exclude=[t.id for t in thoughts if t.id is not None],
            )
            if m.recall > 0 and left > 0
            else []
        )
        recalled = await _with_provenance(memories, owner_id, recalled)
    except StoreError as exc:
        log.warning("round.memory_unavailable", error=str(exc))
        return MemoryBlock(notes=[f"memory_unavailable: {exc}"])
    return MemoryBlock(thoughts=list(reversed(thoughts)), recalled=recalled)


async def _with_provenance(
    memories: MemoryStore, owner_id: str, recalled: list[Recalled]
) -> list[Recalled]:
    """Recalled thoughts marked as quoting outside text where their rows say so.

    Raises:
        StoreError: the rows cannot be read.
    """
    ids = [r.id for r in recalled if r.memory_kind is MemoryKind.THOUGHT]
    if not ids:
        return recalled
    quoting = {m.id for m in await memories.get_many(owner_id, ids) if m.untrusted}
    return [
        r.model_copy(update={"untrusted": True})
        if r.memory_kind is MemoryKind.THOUGHT and r.id in quoting
        else r
        for r in recalled
    ]


async def keep_thought(
    memories: MemoryStore | None,
    *,
    owner_id: str,
    round_id: str,
    at: datetime,
    text: str,
    outside: Iterable[str] = (),
) -> str | None:
    """Keep a round's private thought as a memory of kind thought; a note when it could not be.

    `outside` is the outside text the round's request held (messages,
    memories, the state file, tool results): a thought that quotes it keeps
    that provenance (`untrusted`), so no later round takes the quote for the
    companion's own words.
    """
    if memories is None or not text:
        return None
    try:
        await memories.add(
            Memory(
                owner_id=owner_id,
                kind=MemoryKind.THOUGHT,
                text=text,
                created_at=at,
                source=f"round:{round_id}",
                round_id=round_id,
                untrusted=quotes(text, outside),
            )
        )
    except StoreError as exc:
        log.warning("round.thought_not_kept", error=str(exc))
        return f"thought_not_kept: {exc}"
    return None
