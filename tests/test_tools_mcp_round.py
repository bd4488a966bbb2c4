"""A round that asks an MCP calendar, end to end: a real stdio server, the real CLI, the fake
endpoint scripted to call the tool, and a reminder pushed from what the calendar said."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import ToolCalls

CALENDAR = Path(__file__).resolve().parent / "support" / "mcp_calendar.py"
AGENDA = [
    {"at": "2026-12-03T01:00:00+00:00", "title": "高数期末考试 · 教三 201"},
    {"at": "2026-12-04T10:00:00+00:00", "title": "组会"},
]
BODY = "明早九点教三 201 的高数期末考试，今晚早点睡，准考证记得带上。"


def calendar_config(extra: str = "") -> str:
    command = json.dumps([sys.executable, str(CALENDAR)])
    agenda = json.dumps(json.dumps(AGENDA, ensure_ascii=False), ensure_ascii=False)
    return f"""
[tools]
timeout = "20s"
max_chars = 20000  # every calendar tool up front: these rounds are about MCP, not the budget

[tools.mcp.cal]
command = {command}
env = {{ CALENDAR_AGENDA = {agenda} }}
{extra}
"""


@pytest.mark.slow
def test_a_round_finds_tomorrows_exam_on_the_calendar_and_pushes(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    workdir.write_config(calendar_config(), gate={"default_channel": "web"})
    fake.script(
        ToolCalls((("cal__agenda_for", {"day": "2026-12-03"}),)),
        f"明天有考试，提醒一下。\n[我决定:push]\n[紧急:warning]\n{BODY}",
    )
    result = workdir.think_json()
    assert (result["outcome"], result["reason"]) == ("delivered", "web")
    first, second = fake.chat_requests
    offered = [t["function"]["name"] for t in first.body["tools"]]
    assert "cal__agenda_for" in offered and "memory_search" in offered
    [answer] = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert answer["content"] == "01:00 高数期末考试 · 教三 201"
    [record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert [(t["name"], t["ok"]) for t in record["tools"]] == [("cal__agenda_for", True)]
    assert record["decision"]["body"] == BODY


@pytest.mark.slow
def test_a_server_that_does_not_start_is_a_note_and_the_round_goes_on(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    workdir.write_config('[tools.mcp.gone]\ncommand = ["backthink-no-such-calendar-server"]\n')
    fake.script("[我决定:no_push]")
    assert workdir.think_json()["reason"] == "no_push"
    offered = [t["function"]["name"] for t in fake.chat_requests[0].body["tools"]]
    assert not any(name.startswith("gone__") for name in offered)
    [record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert any(n.startswith("mcp_unavailable: gone: ") for n in record["notes"])


@pytest.mark.slow
def test_a_server_that_dies_mid_round_is_a_note_and_the_round_goes_on(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    workdir.write_config(calendar_config())
    fake.script(
        ToolCalls((("cal__crash", {}),)),
        ToolCalls((("cal__agenda_for", {"day": "2026-12-03"}),)),
        "[我决定:no_push]",
    )
    assert workdir.think_json()["reason"] == "no_push"
    answers = [m["content"] for r in fake.chat_requests[1:] for m in r.body["messages"]]
    assert any("server cal stopped" in str(a) for a in answers)
    # The stopped server's tools are no longer offered on the steps after it stopped.
    first, *later = [
        [t["function"]["name"] for t in r.body.get("tools", [])] for r in fake.chat_requests
    ]
    assert "cal__agenda_for" in first and "memory_search" in later[0]
    assert not any(name.startswith("cal__") for names in later for name in names)
    [record] = json.loads(workdir.cli("rounds", "--json").stdout)
    assert [t["ok"] for t in record["tools"]] == [False, False]
    assert [n for n in record["notes"] if n.startswith("mcp_stopped: cal: ")]
