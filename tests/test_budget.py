"""The tool budget: real servers' definitions wait behind tool_search, found, then called."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import ToolCalls
from support.settings import make_settings

from backthink.config import Settings
from backthink.testing import Calls, FakeClock, ScriptedModel, make_rig
from backthink.tools import ToolSpec
from backthink.tools.definition_budget import SEARCH_NAME, block_chars, rank

FIXTURES = Path(__file__).resolve().parent / "support" / "mcp_fixtures"
SERVERS = ("time", "fetch", "memory", "everything")
T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # 14:00 in Shanghai
NO_PUSH = "[我决定:no_push]"
BUILTINS = ["memory_search", "remember", "capability_list", "recent_rounds"]


class Saved:
    """A tool as a real server defined it, offered under its server's prefix."""

    def __init__(self, server: str, entry: dict[str, Any]) -> None:
        self.spec = ToolSpec(
            f"{server}__{entry['name']}", entry.get("description") or "", entry["inputSchema"]
        )
        self.calls: list[dict[str, Any]] = []

    async def call(self, arguments: dict[str, Any]) -> str:
        self.calls.append(arguments)
        return f"{self.spec.name}: done"


def saved(*servers: str) -> list[Saved]:
    tools = []
    for server in servers:
        doc = json.loads((FIXTURES / f"{server}.json").read_text(encoding="utf-8"))
        tools.extend(Saved(server, entry) for entry in doc["tools"])
    return tools


def settings(**tools: object) -> Settings:
    return make_settings(tools=tools)


async def test_29_tools_of_real_servers_wait_behind_the_search_within_the_budget() -> None:
    """With the four servers' 29 tools, a round offers the built-ins and tool_search only."""
    rig = make_rig(settings(), model=ScriptedModel(NO_PUSH), tools=saved(*SERVERS))
    offered = await rig.thinker.tool_offer("o")
    assert [d["function"]["name"] for d in offered.definitions] == [*BUILTINS, SEARCH_NAME]
    assert len(offered.held) == 29 and offered.held[0] == "time__get_current_time"
    assert offered.chars <= 2_000
    everything = block_chars(tool.spec for tool in saved(*SERVERS))
    assert everything > 12_000  # what the first request carried before
    [search] = [d for d in offered.definitions if d["function"]["name"] == SEARCH_NAME]
    lines = search["function"]["description"].splitlines()
    assert "time: get_current_time, convert_time" in lines
    assert "fetch: fetch" in lines
    assert any(line.startswith("memory: create_entities, create_relations") for line in lines)


async def test_a_search_offers_its_matches_from_the_next_step_and_they_can_be_called() -> None:
    """tool_search answers definitions; the next step offers those tools; a call runs."""
    tools = saved(*SERVERS)
    model = ScriptedModel(
        Calls([(SEARCH_NAME, {"query": "current time"})]),
        Calls([("time__get_current_time", {"timezone": "Asia/Shanghai"})]),
        NO_PUSH,
    )
    rig = make_rig(settings(), model=model, clock=FakeClock(T0), tools=tools)
    record = await rig.thinker.run_round("o", "heartbeat")
    assert record.reason == "no_push"
    assert model.offered[0] == [*BUILTINS, SEARCH_NAME]
    assert model.offered[1] == [
        *BUILTINS,
        SEARCH_NAME,
        "time__get_current_time",
        "time__convert_time",
    ]
    assert model.offered[2] == model.offered[1]
    answer = next(m.text for m in model.calls[1] if m.role == "tool")
    first = json.loads(answer.splitlines()[0])
    assert first["name"] == "time__get_current_time"
    assert first["parameters"]["required"] == ["timezone"]
    [current] = [t for t in tools if t.spec.name == "time__get_current_time"]
    assert current.calls == [{"timezone": "Asia/Shanghai"}]
    assert [(use.name, use.ok) for use in record.tools] == [
        (SEARCH_NAME, True),
        ("time__get_current_time", True),
    ]


async def test_a_held_tool_called_by_its_listed_name_runs_and_is_offered_next() -> None:
    """A model that calls a listed name without searching gets the call and the definition."""
    model = ScriptedModel(Calls([("memory__read_graph", {})]), NO_PUSH)
    rig = make_rig(settings(), model=model, clock=FakeClock(T0), tools=saved(*SERVERS))
    record = await rig.thinker.run_round("o", "heartbeat")
    assert [(use.name, use.ok) for use in record.tools] == [("memory__read_graph", True)]
    assert model.offered[1] == [*BUILTINS, SEARCH_NAME, "memory__read_graph"]


async def test_when_every_definition_fits_every_tool_is_offered() -> None:
    """Within tools.max_chars nothing is held back and there is no tool_search."""
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(settings(), model=model, clock=FakeClock(T0), tools=saved("fetch"))
    await rig.thinker.run_round("o", "heartbeat")
    assert model.offered == [[*BUILTINS, "fetch__fetch"]]
    offered = await rig.thinker.tool_offer("o")
    assert offered.held == [] and offered.chars <= 2_000


async def test_a_tight_budget_holds_built_ins_back_too() -> None:
    """The first request never exceeds the budget, even below the built-ins' own size."""
    rig = make_rig(settings(max_chars=700), model=None, tools=saved(*SERVERS))
    offered = await rig.thinker.tool_offer("o")
    assert offered.chars <= 700
    names = [d["function"]["name"] for d in offered.definitions]
    assert names[-1] == SEARCH_NAME and len(names) < 5
    assert "recent_rounds" in offered.held and len(offered.held) == 34 - len(names)


async def test_a_search_result_keeps_within_the_result_budget() -> None:
    """Definitions too long for tools.max_result_chars are named, never cut in half."""
    model = ScriptedModel(Calls([(SEARCH_NAME, {"query": "entities"})]), NO_PUSH)
    rig = make_rig(
        settings(max_result_chars=900), model=model, clock=FakeClock(T0), tools=saved(*SERVERS)
    )
    await rig.thinker.run_round("o", "heartbeat")
    answer = next(m.text for m in model.calls[1] if m.role == "tool")
    assert len(answer) <= 900 and "too long to show here" in answer
    for line in answer.splitlines():
        if line.startswith("{"):
            json.loads(line)  # whole definitions only
    assert "memory__create_entities" in model.offered[1]


def test_search_ranks_names_over_descriptions_and_an_exact_name_first() -> None:
    """Words in a tool's name weigh more than in its description; its full name wins."""
    tools = saved(*SERVERS)
    assert next(t.spec.name for t in rank(tools, "convert_time")) == "time__convert_time"
    assert next(t.spec.name for t in rank(tools, "sum of two numbers")) == "everything__get-sum"
    assert rank(tools, "天气") == []


def replay_config(servers: tuple[str, ...]) -> str:
    tables = []
    for server in servers:
        command = [sys.executable, str(FIXTURES / "replay.py"), str(FIXTURES / f"{server}.json")]
        tables.append(f"[tools.mcp.{server}]\ncommand = {json.dumps(command)}\n")
    return '[tools]\ntimeout = "20s"\n\n' + "\n".join(tables)


def compact_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


@pytest.mark.slow
def test_real_servers_over_the_budget_are_searched_then_called_in_one_round(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    """Four stdio servers replaying real definitions: search, call, answer, all in one round."""
    workdir.write_config(replay_config(SERVERS))
    fake.script(
        ToolCalls(((SEARCH_NAME, {"query": "current time"}),)),
        ToolCalls((("time__get_current_time", {"timezone": "Asia/Shanghai"}),)),
        NO_PUSH,
    )
    assert workdir.think_json()["reason"] == "no_push"
    first, second, third = fake.chat_requests
    assert compact_chars(first.body["tools"]) <= 2_000
    assert [t["function"]["name"] for t in first.body["tools"]][-1] == SEARCH_NAME
    assert "time__get_current_time" in [t["function"]["name"] for t in second.body["tools"]]
    answers = [m["content"] for m in third.body["messages"] if m["role"] == "tool"]
    assert answers[-1] == 'get_current_time called with {"timezone": "Asia/Shanghai"}'
    [record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert [(t["name"], t["ok"]) for t in record["tools"]] == [
        (SEARCH_NAME, True),
        ("time__get_current_time", True),
    ]


@pytest.mark.slow
def test_the_dry_run_shows_what_is_offered_in_full_and_what_waits(workdir: Workdir) -> None:
    """think --dry-run names the budget's use and every tool behind the search."""
    workdir.write_config(replay_config(SERVERS))
    out = workdir.cli("think", "--dry-run").stdout
    lines = out.splitlines()
    [budget] = [line for line in lines if line.startswith("tools: ")]
    assert budget.startswith("tools: 5 offered in full, ")
    assert budget.endswith("of tools.max_chars = 2000 characters")
    [held] = [line for line in lines if line.startswith(f"behind {SEARCH_NAME}: ")]
    assert held.startswith(f"behind {SEARCH_NAME}: 29: time__get_current_time, ")
    assert f"tool: {SEARCH_NAME}: " in out
