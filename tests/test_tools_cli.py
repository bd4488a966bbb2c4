"""Tools seen from the command line: the audit in `rounds`, the logs, a refusing endpoint."""

from __future__ import annotations

import json

from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail, ToolCalls

SECRET_QUERY = "钢琴老师的电话号码"


def test_rounds_show_the_tool_calls_and_logs_never_their_arguments(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    workdir.write_config()
    fake.script(
        ToolCalls((("memory_search", {"query": SECRET_QUERY}), ("capability_list", {}))),
        "[我决定:no_push]",
    )
    proc = workdir.cli("--debug", "think", "--json")  # --debug: info lines too
    assert json.loads(proc.stdout)["reason"] == "no_push"
    first, second = fake.chat_requests
    assert [t["function"]["name"] for t in first.body["tools"]] == [
        "memory_search",
        "remember",
        "capability_list",
        "recent_rounds",
    ]
    answers = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert len(answers) == 2 and all(isinstance(m["content"], str) for m in answers)
    assert "tool.called" in proc.stderr and "memory_search" in proc.stderr
    assert SECRET_QUERY not in proc.stderr

    [record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert [(t["name"], t["ok"]) for t in record["tools"]] == [
        ("memory_search", True),
        ("capability_list", True),
    ]
    assert all(set(t) == {"name", "ok", "ms"} for t in record["tools"])
    table = workdir.cli("rounds").stdout
    assert table.splitlines()[0].split()[-1] == "tools"
    assert table.splitlines()[1].split()[-1] == "2"


def test_an_endpoint_that_refuses_tools_is_asked_plainly_and_remembered(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    # The second round sees nothing new; it must still ask, to show it asks plainly.
    workdir.write_config("[schedule]\nskip_unchanged = false\n")
    fake.script(
        Fail(
            400, retry_after_s=None, message='"auto" tool choice requires --enable-auto-tool-choice'
        ),
        "[我决定:no_push]",
        "[我决定:no_push]",
    )
    result = json.loads(workdir.cli("think", "--json").stdout)
    assert result["reason"] == "no_push"
    workdir.think_json()
    offered = ["tools" in r.body for r in fake.chat_requests]
    assert offered == [True, False, False]
    [_, record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert any(n.startswith("tools_refused: ") for n in record["notes"])


def test_tools_off_sends_no_tools(workdir: Workdir, fake: FakeOpenAI) -> None:
    workdir.write_config("[tools]\nenabled = false\n")
    fake.script("[我决定:no_push]")
    workdir.think_json()
    assert "tools" not in fake.chat_requests[0].body
