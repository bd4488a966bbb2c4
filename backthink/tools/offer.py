"""Which tools a round offers: the built-ins, an embedding program's own, the MCP servers'.

A round offers tools only when they are on and the endpoint takes them. An
endpoint that refused tool definitions gets plain rounds for a day (the mark
is kept in the database, per endpoint and model), then is asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path

from backthink.config import Settings
from backthink.ports import Clock, EndpointKey, Marks, MemoryStore, RoundStore
from backthink.tools import Tool, ToolBox
from backthink.tools.builtin import RoundContext, builtin_tools
from backthink.tools.definition_budget import OfferedTools, budget_box

# An endpoint that refused tool definitions gets plain rounds this long, then is asked again.
TOOLS_REFUSAL_HOLD = timedelta(days=1)
# The endpoint's mark of its refusal (see `backthink.ports.Marks`).
TOOLS_REFUSED = "tools_refused"
# An MCP call may take this share of `tools.timeout`; the tool box cuts it off at the whole.
MCP_CALL_SHARE = 0.9


def offers_tools(settings: Settings) -> bool:
    """Whether the settings have rounds offer tools (the endpoint's refusal aside)."""
    t = settings.tools
    # A json_schema round offers no tools: its one reply is constrained to the
    # decision object, which leaves no room for a tool call, and the small
    # models that need the constraint seldom use tools well anyway.
    if settings.model.output == "json_schema":
        return False
    return t.enabled and t.max_steps > 0 and t.max_calls > 0


class ToolOffer:
    """The tools of an owner's rounds, and whether the endpoint takes them."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        connected: Callable[[], list[str]],
        rounds: RoundStore | None,
        memories: MemoryStore | None,
        marks: Marks | None = None,
        extra: Sequence[Tool] = (),
        errlog_dir: Path | None = None,
    ) -> None:
        """Offer the built-ins over `rounds` and `memories` (None: those are left out).

        `marks` keep the endpoint's refusal for every process (None: this
        offer's alone). `extra` are offered beside them; `errlog_dir` is where
        MCP servers' stderr is kept (None: it is dropped).
        """
        self._settings = settings
        self._clock = clock
        self._connected = connected
        self._rounds = rounds
        self._memories = memories
        self._marks = marks
        self._extra = list(extra)
        self._errlog_dir = errlog_dir
        self._endpoint = EndpointKey(settings.model.base_url, settings.model.name)
        self._refused_at: datetime | None = None
        self._refusal_read = False

    @property
    def enabled(self) -> bool:
        """Whether rounds offer tools at all (the endpoint's refusal aside)."""
        return offers_tools(self._settings)

    async def refused(self) -> bool:
        """Whether this endpoint and model refused tools less than `TOOLS_REFUSAL_HOLD` ago."""
        if not self._refusal_read and self._marks is not None:
            self._refusal_read = True
            self._refused_at = await self._marks.marked_at(self._endpoint, TOOLS_REFUSED)
        at = self._refused_at
        return at is not None and self._clock.now() - at < TOOLS_REFUSAL_HOLD

    async def refuse(self, at: datetime) -> None:
        """Remember that the endpoint refused tools at `at`."""
        self._refused_at = at
        if self._marks is not None:
            await self._marks.mark(self._endpoint, TOOLS_REFUSED, at)

    async def open(
        self, owner_id: str, round_id: str, stack: AsyncExitStack, *, servers: bool = True
    ) -> tuple[ToolBox, list[str]]:
        """The tool box of one round, and a note for each MCP server that could not serve.

        MCP servers are started on `stack` and stop when it closes; without
        `servers` none is started and their tools are left out.
        """
        t = self._settings.tools
        names: list[str] = []
        context = RoundContext(
            owner_id=owner_id,
            round_id=round_id,
            tz=self._settings.owner.tz,
            clock=self._clock.now,
            channels=self._connected,
            configured_channels=list(self._settings.channels),
        )
        tools: list[Tool] = []
        if self._rounds is not None:
            tools += builtin_tools(self._memories, self._rounds, context, lambda: names)
        tools += self._extra
        problems: list[str] = []
        if t.mcp and servers:
            # Imported only when configured: the SDK is a large import the idle daemon skips.
            from backthink.tools.mcp import open_mcp_tools

            served, problems = await open_mcp_tools(
                t.mcp,
                stack=stack,
                timeout_s=t.timeout.total_seconds(),
                # A little under the tool box's own bound, so the server's clearer
                # "no answer within" reaches the model first.
                call_timeout_s=t.timeout.total_seconds() * MCP_CALL_SHARE,
                errlog_dir=self._errlog_dir,
            )
            tools += served
        names.extend(tool.spec.name for tool in tools)
        box = budget_box(
            tools,
            max_chars=t.max_chars,
            timeout_s=t.timeout.total_seconds(),
            max_result_chars=t.max_result_chars,
        )
        return box, list(problems)

    async def now(self, owner_id: str, *, servers: bool = True) -> OfferedTools:
        """What a round would offer now: definitions in full, and the tools behind the search.

        With `servers`, the MCP servers are started (and stopped again) to ask for
        theirs; without, only the built-in tools and an embedding program's own are
        listed and nothing is started: a page view must have no side effects.

        Raises:
            StoreError: whether the endpoint refused tools cannot be read.
        """
        max_chars = self._settings.tools.max_chars
        if not self.enabled or await self.refused():
            return OfferedTools(max_chars=max_chars)
        async with AsyncExitStack() as stack:
            box, _ = await self.open(owner_id, "dry-run", stack, servers=servers)
            definitions = [spec.definition() for spec in box.specs]
            return OfferedTools(definitions, box.held, max_chars)
