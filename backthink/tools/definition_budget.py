"""The tool budget: which tools a round offers in full, and `tool_search` for the rest.

Every definition a round offers is paid for on every model call of every
round, whether the model uses the tool or not. When all of them fit in
`tools.max_chars` (compact JSON, as sent), the round offers them all. When
they do not, it offers its own tools (the built-ins and an embedding
program's) while they fit, plus `tool_search(query)`, whose description names
each server's tools on one line. A search answers the best matches' full
definitions, and those tools are offered from the model's next step on. So
the tool block of a round's first request never exceeds the budget; what the
model asks for afterwards is counted by `max_steps` and `max_calls` like any
call.

Names and descriptions come from outside programs: they are matched as plain
substrings, never as patterns, and nothing in them decides anything but which
definitions a search answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from backthink.tools import Tool, ToolBox, ToolError, ToolSpec

SEARCH_NAME = "tool_search"
SEARCH_RESULTS = 5
"""Tools one search offers at most."""
QUERY_CHARS = 200
"""Characters of a query that are read; the rest is ignored."""
LINE_CHARS = 300
"""Characters of one server's line in tool_search's description."""
SERVER_JOIN = "__"
"""How a server's name prefixes its tools' names (`NAME__tool`)."""
OWN_TOOLS = "built-in"
"""How the listing names tools that belong to no server."""
SEARCH_HEAD = (
    "Find more tools by what they do or by name. It answers their definitions; "
    "you can call them from your next step on. Tools by server:"
)
# Words that say nothing about which tool is meant.
_STOP_WORDS = frozenset(
    "a an and by can for from get i in is it me my of on or please the to tool tools use "
    "with".split()
)


def block_chars(specs: Iterable[ToolSpec]) -> int:
    """Characters of these definitions as the request carries them (compact JSON)."""
    return len(_compact([spec.definition() for spec in specs]))


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def split_name(name: str) -> tuple[str, str]:
    """A tool's server and its own name: `("time", "convert_time")`, or `("", name)`."""
    server, sep, own = name.partition(SERVER_JOIN)
    return (server, own) if sep and server and own else ("", name)


@dataclass(frozen=True)
class OfferedTools:
    """What a round offers before the model asks: definitions in full, and names held back."""

    definitions: list[dict[str, Any]] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    """Tools that wait behind tool_search, by their offered names."""
    max_chars: int = 0

    @property
    def chars(self) -> int:
        """Characters of the offered definitions, as sent."""
        return len(_compact(self.definitions)) if self.definitions else 0


class ToolSearch:
    """tool_search(query): the full definitions of the held tools that match a query."""

    def __init__(self, held: Sequence[Tool], *, listing: str, result_chars: int) -> None:
        """Search `held`; `listing` is the description's list of names by server."""
        self._held = list(held)
        self._result_chars = result_chars
        self._reveal: Callable[[list[str]], None] = lambda names: None
        description = f"{SEARCH_HEAD}\n{listing}" if listing else SEARCH_HEAD
        self._spec = ToolSpec(
            SEARCH_NAME,
            description,
            {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        )

    @property
    def spec(self) -> ToolSpec:
        """How the search is offered to the model."""
        return self._spec

    def bind(self, reveal: Callable[[list[str]], None]) -> None:
        """Offer the tools a search answers through `reveal` (the round's tool box)."""
        self._reveal = reveal

    async def call(self, arguments: dict[str, Any]) -> str:
        """Answer the best matches' definitions and offer them from the next step on.

        Raises:
            ToolError: the query is not a non-empty string.
        """
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        found = rank(self._held, query[:QUERY_CHARS])[:SEARCH_RESULTS]
        if not found:
            return "no tool matches; try other words, or a tool's name from the list"
        names = [tool.spec.name for tool in found]
        closing = "You can call " + ", ".join(names) + " from your next step on."
        # Room is kept for the closing lines, so no definition is ever cut in half.
        room = self._result_chars - 2 * len(closing)
        lines: list[str] = []
        left: list[str] = []
        for tool in found:
            line = _compact(tool.spec.definition()["function"])
            if sum(len(x) + 1 for x in lines) + len(line) <= room:
                lines.append(line)
            else:
                left.append(tool.spec.name)
        if left:
            lines.append("(too long to show here: " + ", ".join(left) + ")")
        lines.append(closing)
        self._reveal(names)
        return "\n".join(lines)


def rank(tools: Sequence[Tool], query: str) -> list[Tool]:
    """The tools that match `query`, best first (ties in their given order).

    A word of the query found among a name's words scores 3, inside a name 2,
    in a description 1; the query being a tool's whole name wins outright.
    """
    wanted = query.strip().lower()
    terms = [t for t in _words(wanted) if t not in _STOP_WORDS]
    scored: list[tuple[int, int, Tool]] = []
    for i, tool in enumerate(tools):
        name = tool.spec.name.lower()
        own = split_name(name)[1]
        if wanted in (name, own):
            scored.append((-1000, i, tool))
            continue
        name_words = set(_words(name))
        description = tool.spec.description.lower()
        score = 0
        for term in terms:
            if term in name_words:
                score += 3
            elif term in name:
                score += 2
            if term in description:
                score += 1
        if score:
            scored.append((-score, i, tool))
    scored.sort(key=lambda item: (item[0], item[1]))
    if not scored:
        return []
    # A word that only brushes a description ("the current session") is dropped
    # when other tools match by name: a third of the best score is the least.
    least = max(1, -scored[0][0] // 3)
    return [tool for score, _, tool in scored if -score >= least]


def _words(text: str) -> list[str]:
    """Runs of letters and digits (any script), lower-cased; one pass, no pattern."""
    words: list[str] = []
    current: list[str] = []
    for char in text:
        if char.isalnum():
            current.append(char)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return [w for w in words if len(w) > 1 or not w.isascii()]


def listing(held: Sequence[Tool], fits: Callable[[str], bool]) -> str:
    """tool_search's list of names, one line per server, as long as `fits` allows.

    A line longer than LINE_CHARS, or past what fits, ends with how many names
    it left out; those tools are still found by a search.
    """
    groups: dict[str, list[str]] = {}
    for tool in held:
        server, own = split_name(tool.spec.name)
        groups.setdefault(server or OWN_TOOLS, []).append(own)
    lines: list[str] = []
    for server, names in groups.items():
        line = _line(server, names, lambda text: fits("\n".join([*lines, text])))
        if line is None:
            break
        lines.append(line)
    return "\n".join(lines)


def _line(server: str, names: list[str], fits: Callable[[str], bool]) -> str | None:
    """One server's line with as many names as fit; None when not even its name fits."""
    whole = f"{server}: {', '.join(names)}"
    if len(whole) <= LINE_CHARS and fits(whole):
        return whole
    best: str | None = None
    for n in range(len(names)):
        shown = ", ".join(names[:n])
        text = f"{server}: {shown}{', ' if shown else ''}+{len(names) - n} more"
        if len(text) > LINE_CHARS or not fits(text):
            break
        best = text
    return best


def budget_box(
    tools: Sequence[Tool], *, max_chars: int, timeout_s: float, max_result_chars: int
) -> ToolBox:
    """The tool box of a round whose first request offers at most `max_chars` of definitions."""
    every = [tool.spec for tool in tools]
    if block_chars(every) <= max_chars:
        return ToolBox(tools, timeout_s=timeout_s, max_result_chars=max_result_chars)
    own = [tool for tool in tools if not split_name(tool.spec.name)[0]]
    full = list(own)
    while True:
        held = [tool for tool in tools if tool not in full]
        search = _search(full, held, max_chars, max_result_chars)
        if search is not None or not full:
            break
        full.pop()  # the last of the round's own tools waits behind the search too
    if search is None:
        # The budget's least value leaves room for the search with no listing at all.
        search = ToolSearch(held, listing="", result_chars=max_result_chars)
    box = ToolBox(
        [*full, search, *held],
        timeout_s=timeout_s,
        max_result_chars=max_result_chars,
        held=[tool.spec.name for tool in held],
    )
    search.bind(box.offer)
    return box


def _search(
    full: Sequence[Tool], held: Sequence[Tool], max_chars: int, max_result_chars: int
) -> ToolSearch | None:
    """tool_search over `held` beside `full` within `max_chars`, or None when it cannot fit."""
    specs = [tool.spec for tool in full]

    def fits(text: str) -> bool:
        probe = ToolSearch(held, listing=text, result_chars=max_result_chars)
        return block_chars([*specs, probe.spec]) <= max_chars

    if not fits(""):
        return None
    return ToolSearch(held, listing=listing(held, fits), result_chars=max_result_chars)
