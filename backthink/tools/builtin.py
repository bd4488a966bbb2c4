"""The built-in tools of a round: memory_search, remember, capability_list, recent_rounds.

Their schemas are kept short (the whole tool block is paid for on every
round that offers it), and their results are plain lines. A round gets its
own instances, bound to its owner and its id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from backthink.decision.inert import inert
from backthink.errors import StoreError
from backthink.models import Memory, MemoryKind
from backthink.ports import MemoryStore, RoundStore
from backthink.tools import Tool, ToolError, ToolSpec

SEARCH_RESULTS = 5
"""Memories one memory_search returns at most."""
RECENT_ROUNDS_MAX = 10
"""Rounds one recent_rounds call may ask for."""
REMEMBER_CHARS = 500
"""Characters of one remembered text; a longer one is refused, not cut."""
REMEMBER_PER_ROUND = 3
"""Memories one round may write; a model that keeps writing is told to stop."""
LINE_CHARS = 300
"""Characters of one line of a result."""

_TEXT = {"type": "string"}


@dataclass
class RoundContext:
    """What the built-ins of one round know about it."""

    owner_id: str
    round_id: str
    tz: ZoneInfo
    clock: Callable[[], datetime]
    channels: Callable[[], Sequence[str]]
    """The channels connected now."""
    configured_channels: Sequence[str]
    remembered: int = 0


def _when(at: datetime, tz: ZoneInfo) -> str:
    return at.astimezone(tz).strftime("%Y-%m-%d %H:%M")


class MemorySearch:
    """memory_search(query): the owner's memories holding every word of the query."""

    spec = ToolSpec(
        "memory_search",
        "Search your long-term memories (notes, facts about the owner, earlier thoughts).",
        {"type": "object", "properties": {"query": _TEXT}, "required": ["query"]},
    )

    def __init__(self, memories: MemoryStore, context: RoundContext) -> None:
        self._memories = memories
        self._context = context

    async def call(self, arguments: dict[str, Any]) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        try:
            found = await self._memories.search(
                self._context.owner_id, query[:200], limit=SEARCH_RESULTS
            )
        except StoreError as exc:
            raise ToolError(f"memory is unavailable: {exc}") from None
        if not found:
            return "no memory holds every word of the query"
        tz = self._context.tz
        return "\n".join(
            f"- {_when(m.created_at, tz)} {m.kind.value}: {inert(m.text, LINE_CHARS)}"
            for m in found
        )


class Remember:
    """remember(text, kind): keep a note or a fact about the owner."""

    spec = ToolSpec(
        "remember",
        "Keep a short note for later, or a lasting fact about the owner (kind profile).",
        {
            "type": "object",
            "properties": {"text": _TEXT, "kind": {"enum": ["note", "profile"]}},
            "required": ["text"],
        },
    )

    def __init__(self, memories: MemoryStore, context: RoundContext) -> None:
        self._memories = memories
        self._context = context

    async def call(self, arguments: dict[str, Any]) -> str:
        text, kind = arguments.get("text"), arguments.get("kind", "note")
        if not isinstance(text, str) or not text.strip():
            raise ToolError("text must be a non-empty string")
        if len(text) > REMEMBER_CHARS:
            raise ToolError(f"text is longer than {REMEMBER_CHARS} characters; keep it short")
        if kind not in ("note", "profile"):
            raise ToolError("kind must be note or profile")
        context = self._context
        if context.remembered >= REMEMBER_PER_ROUND:
            raise ToolError(f"at most {REMEMBER_PER_ROUND} memories per round")
        try:
            kept = await self._memories.add(
                Memory(
                    owner_id=context.owner_id,
                    kind=MemoryKind(kind),
                    text=text.strip(),
                    created_at=context.clock(),
                    source=f"round:{context.round_id}",
                    round_id=context.round_id,
                )
            )
        except StoreError as exc:
            raise ToolError(f"memory is unavailable: {exc}") from None
        context.remembered += 1
        return f"remembered as memory {kept.id}"


class CapabilityList:
    """capability_list(): the tools and channels this round has."""

    spec = ToolSpec("capability_list", "List your tools and the owner's channels.")

    def __init__(self, context: RoundContext, tool_names: Callable[[], Sequence[str]]) -> None:
        self._context = context
        self._tool_names = tool_names

    async def call(self, arguments: dict[str, Any]) -> str:
        connected = set(self._context.channels())
        channels = ", ".join(
            f"{name} ({'connected' if name in connected else 'down'})"
            for name in self._context.configured_channels
        )
        return f"tools: {', '.join(self._tool_names())}\nchannels: {channels or 'none'}"


class RecentRounds:
    """recent_rounds(n): what the companion recently decided, and why."""

    spec = ToolSpec(
        "recent_rounds",
        "Your latest rounds: when, outcome, reason, and any message sent.",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
    )

    def __init__(self, rounds: RoundStore, context: RoundContext) -> None:
        self._rounds = rounds
        self._context = context

    async def call(self, arguments: dict[str, Any]) -> str:
        n = arguments.get("n", 5)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ToolError("n must be a positive integer")
        try:
            records = await self._rounds.list(
                owner_id=self._context.owner_id, limit=min(n, RECENT_ROUNDS_MAX)
            )
        except StoreError as exc:
            raise ToolError(f"the round log is unavailable: {exc}") from None
        if not records:
            return "no rounds yet"
        lines = []
        for r in records:
            line = f"- {_when(r.started_at, self._context.tz)} {r.outcome.value}/{r.reason}"
            if r.body:
                line += f": {inert(r.body, LINE_CHARS)}"
            lines.append(line)
        return "\n".join(lines)


def builtin_tools(
    memories: MemoryStore | None,
    rounds: RoundStore,
    context: RoundContext,
    tool_names: Callable[[], Sequence[str]],
) -> list[Tool]:
    """The built-ins of one round; the memory tools only when memory is on."""
    tools: list[Tool] = []
    if memories is not None:
        tools += [MemorySearch(memories, context), Remember(memories, context)]
    tools += [CapabilityList(context, tool_names), RecentRounds(rounds, context)]
    return tools
