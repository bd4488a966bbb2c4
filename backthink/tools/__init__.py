"""Tools a round may call before it writes its footer: the built-ins and MCP servers' tools.

A `Tool` is a name, a short JSON schema and an async call. A `ToolBox` holds
the tools of one round and runs calls the model asked for, each bounded in
time and in the size of its result; whatever goes wrong inside a tool comes
back as an error result for the model, never as an exception for the round.
Tool output is outside text: the round treats it like the owner's messages.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from backthink.decision.inert import defuse
from backthink.records import ToolCall, ToolUse

log = structlog.get_logger(__name__)

CUT_MARKER = "\n…[{} characters cut]…\n"
HEAD_SHARE = 0.75
"""A result cut to size keeps this share of its room from the head, the rest from the tail."""
MAX_ARGUMENT_CHARS = 8_000
"""Arguments longer than this are refused unread: no tool of a round needs more."""


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: its name as offered, a description, a JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def definition(self) -> dict[str, Any]:
        """The chat-completions `tools` entry of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class ToolError(Exception):
    """A tool could not do what was asked; the message is told to the model as the result.

    A `note` is for the round's record: something its owner should know (a
    server that stopped), said once per round however often it happens.
    """

    def __init__(self, message: str, *, note: str | None = None) -> None:
        super().__init__(message)
        self.note = note


class Tool(Protocol):
    """One callable tool."""

    @property
    def spec(self) -> ToolSpec:
        """How the tool is offered to the model."""
        ...

    async def call(self, arguments: dict[str, Any]) -> str:
        """Run the tool with the model's arguments and return its result as text.

        Raises:
            ToolError: the tool refused or failed; the message goes to the model.
        """
        ...


@dataclass(frozen=True)
class ToolResult:
    """What one call returned to the model, and its audit entry."""

    text: str
    use: ToolUse
    outside: str = ""
    """The result as the tool wrote it (cut to size), tags and all, for the echo guard."""


def cut_result(text: str, limit: int) -> str:
    """Cut a result to `limit` characters, keeping its head and its tail around a marker."""
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(len(text) - limit)
    room = max(limit - len(marker), 0)
    head = int(room * HEAD_SHARE)
    tail = room - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


class ToolBox:
    """The tools of one round, and the bounded way each call runs.

    Tools named in `held` are callable but not offered: they wait behind a
    search (see `backthink.tools.definition_budget`) until `offer` names them, or until
    the model calls one by the name the search's listing showed it.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        timeout_s: float,
        max_result_chars: int,
        held: Collection[str] = (),
    ) -> None:
        """Offer `tools` (names must be unique) with per-call bounds, all but `held`."""
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            name = tool.spec.name
            if name in self._tools:
                raise ValueError(f"two tools are offered as {name!r}")
            self._tools[name] = tool
        self._held = {name for name in held if name in self._tools}
        self._timeout_s = timeout_s
        self._max_result_chars = max_result_chars
        self._done: dict[tuple[str, str], str] = {}
        self.notes: list[str] = []
        """Notes for the round's record that calls raised, each once."""

    @property
    def specs(self) -> list[ToolSpec]:
        """The specs offered now, in the order the tools were given."""
        return [tool.spec for name, tool in self._tools.items() if name not in self._held]

    @property
    def held(self) -> list[str]:
        """Names of the tools not offered yet, in the order they were given."""
        return [name for name in self._tools if name in self._held]

    def offer(self, names: Collection[str]) -> None:
        """Offer these held tools from the next model step on."""
        self._held.difference_update(names)

    def definitions(self) -> list[dict[str, Any]]:
        """The chat-completions entries of the tools offered now that can still be called.

        A tool held behind `tool_search` is not offered yet, and one whose
        server is known to be gone (`gone` is true, as an MCP server's tools
        say once it stopped) is offered no more.
        """
        return [
            tool.spec.definition()
            for name, tool in self._tools.items()
            if name not in self._held and not _gone(tool)
        ]

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call; every failure becomes an error result, never an exception."""
        started = time.perf_counter()
        ok, text = await self._outcome(call)
        if call.name in self._held:
            # Called by the name the search listed: its definition goes with the next step.
            self._held.discard(call.name)
        ms = round((time.perf_counter() - started) * 1000, 1)
        if not ok:
            text = f"error: {text}"
        use = ToolUse(name=call.name, ok=ok, ms=ms, args_chars=len(call.arguments))
        log.info("tool.called", tool=call.name, ok=ok, ms=ms)
        # Outside text: no footer tag or speaker marker of it reaches the model as such;
        # the echo guard still sees it as written, tags being what it looks for.
        cut = cut_result(text, self._max_result_chars)
        return ToolResult(defuse(cut), use, outside=cut)

    async def _outcome(self, call: ToolCall) -> tuple[bool, str]:
        tool = self._tools.get(call.name)
        if tool is None:
            return False, f"there is no tool named {call.name[:64]!r}"
        if len(call.arguments) > MAX_ARGUMENT_CHARS:
            return False, f"arguments longer than {MAX_ARGUMENT_CHARS} characters"
        try:
            arguments = json.loads(call.arguments or "{}")
        except (ValueError, RecursionError):
            return False, "the arguments are not valid JSON"
        if not isinstance(arguments, dict):
            return False, "the arguments must be a JSON object"
        key = (call.name, json.dumps(arguments, sort_keys=True, ensure_ascii=False))
        if key in self._done:
            # The same call twice in one round learns nothing new: answer from the first.
            return True, self._done[key]
        try:
            text = await asyncio.wait_for(tool.call(arguments), self._timeout_s)
        except TimeoutError:
            return False, f"the tool did not answer within {self._timeout_s:g} s"
        except ToolError as exc:
            if exc.note is not None and exc.note not in self.notes:
                self.notes.append(exc.note)
            return False, str(exc) or "the tool failed"
        except Exception as exc:  # a tool's own bug must not end the round
            log.warning("tool.crashed", tool=call.name, error_type=type(exc).__name__)
            return False, f"the tool failed ({type(exc).__name__})"
        self._done[key] = text
        return True, text


def _gone(tool: Tool) -> bool:
    """Whether a tool says it can no longer be called (most tools cannot stop)."""
    return getattr(tool, "gone", False) is True
