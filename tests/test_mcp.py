"""MCP tools against a real calendar server over stdio and loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from mcp import types as mcp_types
from support.mcp_calendar import LONG_NAME

from backthink.config import McpServerSettings
from backthink.tools import Tool, ToolError
from backthink.tools.mcp import McpTool, open_mcp_tools
from backthink.tools.mcp_shapes import clean_schema, offered_name, render_result

# MCP's own protocol and processes, over calendars with fixed dates: no hour changes them.
pytestmark = pytest.mark.hourless

CALENDAR = str(Path(__file__).parent / "support" / "mcp_calendar.py")
START_S = 30.0  # seconds for a server to start on a busy machine; Python imports dominate
TEST_S = 50.0  # seconds for a whole test
CLOSE_S = 7.0  # seconds: stdin close, 2 s grace, SIGTERM, 2 s, SIGKILL, reaped
AGENDA = [
    {"at": "2031-05-06T09:00:00+00:00", "title": "Dentist"},
    {"at": "2031-05-07T20:00:00+00:00", "title": "Film night"},
]


def stdio(*args: str, **fields: Any) -> McpServerSettings:
    """Settings for the calendar over stdio, with extra arguments."""
    return McpServerSettings(command=[sys.executable, CALENDAR, *args], **fields)


def by_name(tools: list[Tool]) -> dict[str, McpTool]:
    """The tools by offered name, as the MCP tools they are."""
    out = {}
    for tool in tools:
        assert isinstance(tool, McpTool)
        out[tool.spec.name] = tool
    return out


def assert_gone(pid_file: Path) -> None:
    """The process whose id is in `pid_file` no longer exists."""
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


class HttpCalendar:
    """The calendar served over streamable HTTP on 127.0.0.1 in its own process."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen(
            [sys.executable, CALENDAR, "--http", str(self.port)],
            env={**os.environ, "CALENDAR_AGENDA": json.dumps(AGENDA)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_S
        while True:
            # A process start has no event to wait on; poll the port under a deadline.
            if self.process.poll() is not None:
                raise RuntimeError("the HTTP calendar exited at start")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        """End the server process."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def http_calendar() -> Iterator[HttpCalendar]:
    """One HTTP calendar for the tests that do not kill it."""
    server = HttpCalendar()
    yield server
    server.stop()


# Pure parts: names, schemas, results.


def test_names_are_prefixed_sanitized_and_capped() -> None:
    """Names become NAME__tool with unsafe characters as `_`, at most 64 characters."""
    taken: set[str] = set()
    assert offered_name("cal", "agenda", taken) == "cal__agenda"
    assert offered_name("cal", "week.summary", taken) == "cal__week_summary"
    assert offered_name("cal", "a b/c", taken) == "cal__a_b_c"
    long = offered_name("cal", LONG_NAME, taken)
    assert len(long) == 64
    assert long.startswith("cal__an_unusually_long")
    assert long != offered_name("cal", LONG_NAME + "_2", taken)
    assert long == offered_name("cal", LONG_NAME, taken), "the same tool, the same name"


def test_colliding_names_get_a_hash() -> None:
    """Two tools that sanitize to the same name are offered under different names."""
    taken = {offered_name("cal", "week.summary", set())}
    other = offered_name("cal", "week_summary", taken)
    assert other != "cal__week_summary"
    assert other.startswith("cal__week_summary_")
    assert len(other) <= 64


def test_schema_loses_titles_but_not_a_property_named_title() -> None:
    """`title` keywords go at every level; a property called title stays; objects get properties."""
    schema = {
        "title": "addArguments",
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string"},
            "when": {
                "anyOf": [{"type": "string", "title": "A"}, {"type": "null"}],
                "default": {"title": "data, kept"},
            },
            "extra": {"type": "object", "title": "Extra"},
            "tags": {"type": "array", "items": {"title": "Tag", "type": "string"}},
        },
        "$defs": {"Item": {"title": "Item", "type": "object", "properties": {}}},
    }
    assert clean_schema(schema) == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "when": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": {"title": "data, kept"},
            },
            "extra": {"type": "object", "properties": {}},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "$defs": {"Item": {"type": "object", "properties": {}}},
    }
    assert clean_schema({"type": "object"}) == {"type": "object", "properties": {}}
    assert clean_schema(None) == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (
            mcp_types.CallToolResult(
                content=[mcp_types.TextContent(text="one"), mcp_types.TextContent(text="two")],
                structured_content={"ignored": True},
            ),
            "one\ntwo",
        ),
        (
            mcp_types.CallToolResult(content=[], structured_content={"free": ["10:00"], "n": 1}),
            '{"free":["10:00"],"n":1}',
        ),
        (
            mcp_types.CallToolResult(
                content=[
                    mcp_types.TextContent(text="caption"),
                    mcp_types.ImageContent(data="AAAA", mime_type="image/png"),
                    mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
                    mcp_types.ResourceLink(name="notes", uri="file:///tmp/notes.txt"),
                ]
            ),
            "caption\n[image image/png]\n[audio audio/wav]\n[resource link notes]",
        ),
        (
            mcp_types.CallToolResult(
                content=[mcp_types.ImageContent(data="AAAA", mime_type="image/jpeg")],
                structured_content=[1, 2],
            ),
            "[1,2]\n[image image/jpeg]",
        ),
        (
            mcp_types.CallToolResult(
                content=[
                    mcp_types.EmbeddedResource(
                        resource=mcp_types.TextResourceContents(uri="memo://1", text="memo text")
                    ),
                    mcp_types.EmbeddedResource(
                        resource=mcp_types.BlobResourceContents(
                            uri="memo://2", blob="AAAA", mime_type="application/pdf"
                        )
                    ),
                ]
            ),
            "memo text\n[resource application/pdf]",
        ),
    ],
    ids=["text", "structured", "placeholders", "structured-with-image", "resources"],
)
def test_results_render_as_text(result: mcp_types.CallToolResult, text: str) -> None:
    """Text blocks joined, else structured JSON; other blocks as one-line placeholders."""
    assert render_result(result) == text


# Real servers.


@pytest.mark.slow
async def test_stdio_server_offers_and_answers(tmp_path: Path) -> None:
    """A stdio server's tools are offered as cal__..., answer, and its process ends on close."""
    pid_file = tmp_path / "cal.pid"
    settings = stdio("--pid-file", str(pid_file), env={"CALENDAR_AGENDA": json.dumps(AGENDA)})
    async with asyncio.timeout(TEST_S):
        async with AsyncExitStack() as stack:
            tools, notes = await open_mcp_tools({"cal": settings}, stack=stack, timeout_s=START_S)
            assert notes == []
            offered = by_name(tools)
            assert {"cal__agenda_for", "cal__next_events", "cal__week_summary"} <= set(offered)
            assert all(len(name) <= 64 for name in offered)
            assert offered["cal__week_summary"].original_name == "week.summary"
            assert offered["cal__week_summary"].server == "cal"
            summary = offered["cal__week_summary"].spec
            assert len(summary.description) <= 300
            assert summary.description.startswith("A summary of the week. A summary")
            assert "title" not in json.dumps(offered["cal__agenda_for"].spec.parameters)
            assert offered["cal__agenda_for"].spec.parameters["properties"] == {
                "day": {"type": "string"}
            }

            # The agenda came through the env, over the SDK's default environment.
            agenda = offered["cal__agenda_for"]
            assert await agenda.call({"day": "2031-05-07"}) == "20:00 Film night"
            assert "Dentist" in await offered["cal__next_events"].call(
                {"after": "2031-05-01T00:00:00+00:00", "n": 1}
            )
            assert await offered["cal__week_summary"].call({"week": "19"}) == "2 events in week 19"
            assert_alive = int(pid_file.read_text())
            os.kill(assert_alive, 0)
            started = time.perf_counter()
        closed_in = time.perf_counter() - started
    assert closed_in < CLOSE_S
    assert_gone(pid_file)


async def test_http_server_offers_and_answers(http_calendar: HttpCalendar) -> None:
    """A streamable HTTP server's tools are offered and answer like a stdio server's."""
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools(
            {"web-cal": McpServerSettings(url=http_calendar.url)}, stack=stack, timeout_s=START_S
        )
        assert notes == []
        offered = by_name(tools)
        assert "web-cal__week_summary" in offered
        assert await offered["web-cal__agenda_for"].call({"day": "2031-05-06"}) == "09:00 Dentist"
        assert await offered["web-cal__picture"].call({}) == "a red dot\n[image image/png]"
        assert await offered["web-cal__structured_only"].call({}) == '{"free":["10:00","14:00"]}'
        big = await offered["web-cal__huge"].call({"chars": 200_000})
        assert big == "x" * 200_000, "the ToolBox, not the MCP tool, cuts long results"


async def test_allow_offers_only_the_listed_tools(http_calendar: HttpCalendar) -> None:
    """`allow` names the server's own tool names; nothing else is offered."""
    settings = McpServerSettings(url=http_calendar.url, allow=["agenda_for", "week.summary"])
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools({"cal": settings}, stack=stack, timeout_s=START_S)
    assert notes == []
    assert sorted(tool.spec.name for tool in tools) == ["cal__agenda_for", "cal__week_summary"]


@pytest.mark.slow
async def test_servers_that_cannot_start_become_notes(http_calendar: HttpCalendar) -> None:
    """A missing command and a server that exits at start are notes; the others still work."""
    servers = {
        "gone": McpServerSettings(command=["nosuchprog", "--token", "s3cret"]),
        "quits": stdio("--exit", env={"API_KEY": "s3cret"}),
        "cal": McpServerSettings(url=http_calendar.url),
    }
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools(servers, stack=stack, timeout_s=START_S)
        assert notes[0] == "mcp_unavailable: gone: command not found: nosuchprog"
        assert notes[1].startswith("mcp_unavailable: quits: connection closed")
        assert len(notes) == 2
        assert all("s3cret" not in note and len(note) <= 160 for note in notes)
        offered = by_name(tools)
        assert {tool.server for tool in offered.values()} == {"cal"}
        assert await offered["cal__agenda_for"].call({"day": "2031-05-06"}) == "09:00 Dentist"


async def test_a_refused_connection_is_a_note() -> None:
    """A URL nobody listens on is a note naming the server, never the URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp?token=s3cret"
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools(
            {"web": McpServerSettings(url=url)}, stack=stack, timeout_s=START_S
        )
    assert tools == []
    assert notes == ["mcp_unavailable: web: cannot connect"]


async def test_an_error_in_the_round_passes_through(http_calendar: HttpCalendar) -> None:
    """The round's own exception leaves the stack as it was raised, not in a group."""

    class RoundFailedError(Exception):
        pass

    async with asyncio.timeout(TEST_S):
        with pytest.raises(RoundFailedError):
            async with AsyncExitStack() as stack:
                tools, _ = await open_mcp_tools(
                    {"cal": McpServerSettings(url=http_calendar.url)},
                    stack=stack,
                    timeout_s=START_S,
                )
                await by_name(tools)["cal__agenda_for"].call({"day": "2031-05-06"})
                raise RoundFailedError


@pytest.mark.slow
async def test_a_cancelled_round_closes_its_servers(tmp_path: Path) -> None:
    """Cancelling a round in the middle of a call ends the call and the server's process."""
    pid_file = tmp_path / "cal.pid"
    calling = asyncio.Event()

    async def round_() -> None:
        async with AsyncExitStack() as stack:
            tools, _ = await open_mcp_tools(
                {"cal": stdio("--pid-file", str(pid_file))}, stack=stack, timeout_s=START_S
            )
            calling.set()
            await by_name(tools)["cal__slow"].call({"seconds": 30})

    async with asyncio.timeout(TEST_S):
        task = asyncio.create_task(round_())
        await calling.wait()
        await asyncio.sleep(0.2)  # let the call reach the server
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert_gone(pid_file)


@pytest.mark.slow
async def test_a_silent_server_times_out_and_is_killed_on_close(
    tmp_path: Path, http_calendar: HttpCalendar
) -> None:
    """A server that never answers is a note after the timeout, and is gone after close."""
    pid_file = tmp_path / "mute.pid"
    servers = {
        "mute": stdio("--mute", "--pid-file", str(pid_file)),
        "cal": McpServerSettings(url=http_calendar.url),
    }
    async with asyncio.timeout(TEST_S):
        started = time.perf_counter()
        async with AsyncExitStack() as stack:
            tools, notes = await open_mcp_tools(servers, stack=stack, timeout_s=2.0)
            opened_in = time.perf_counter() - started
            assert notes == ["mcp_unavailable: mute: no answer within 2 s"]
            assert 2.0 <= opened_in < 4.0
            offered = by_name(tools)
            assert await offered["cal__agenda_for"].call({"day": "2031-05-06"}) == "09:00 Dentist"
            started = time.perf_counter()
        closed_in = time.perf_counter() - started
    # It ignores its stdin closing: the SDK's SIGTERM, 2 s after, is what ends it. Its
    # owner starts that as soon as it times out, so closing waits only for the rest.
    assert closed_in < CLOSE_S
    assert_gone(pid_file)


@pytest.mark.slow
async def test_stdio_call_failures_become_tool_errors(tmp_path: Path) -> None:
    """A slow call, a raising tool and a dying server are ToolErrors; the dead server fails fast."""
    pid_file = tmp_path / "cal.pid"
    servers = {"cal": stdio("--pid-file", str(pid_file))}
    async with asyncio.timeout(TEST_S):
        async with AsyncExitStack() as stack:
            tools, notes = await open_mcp_tools(
                servers, stack=stack, timeout_s=START_S, call_timeout_s=1.0
            )
            assert notes == []
            offered = by_name(tools)
            with pytest.raises(ToolError, match=r"^no answer within 1 s$"):
                await offered["cal__slow"].call({"seconds": 30})
            # The session survives a timed-out call.
            assert await offered["cal__agenda_for"].call({"day": "2031-05-08"}) == (
                "12:00 Lunch with Mei"
            )
            with pytest.raises(ToolError, match="Error executing tool boom"):
                await offered["cal__boom"].call({})
            assert await offered["cal__picture"].call({}) == "a red dot\n[image image/png]"
            assert len(await offered["cal__huge"].call({"chars": 300_000})) == 300_000

            with pytest.raises(ToolError, match=r"^server cal stopped: connection closed$"):
                await offered["cal__crash"].call({})
            started = time.perf_counter()
            with pytest.raises(ToolError, match=r"^server cal stopped: connection closed$"):
                await offered["cal__agenda_for"].call({"day": "2031-05-08"})
            assert time.perf_counter() - started < 0.1
    assert_gone(pid_file)


@pytest.mark.slow
async def test_http_server_dying_mid_call_is_a_tool_error() -> None:
    """An HTTP server killed mid-call is a ToolError naming it; later calls fail fast."""
    server = HttpCalendar()
    try:
        async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
            tools, notes = await open_mcp_tools(
                {"cal": McpServerSettings(url=server.url)},
                stack=stack,
                timeout_s=START_S,
                call_timeout_s=5.0,
            )
            assert notes == []
            offered = by_name(tools)
            with pytest.raises(ToolError, match=r"^server cal stopped: "):
                await offered["cal__crash"].call({})
            started = time.perf_counter()
            with pytest.raises(ToolError, match=r"^server cal stopped: "):
                await offered["cal__agenda_for"].call({"day": "2031-05-08"})
            assert time.perf_counter() - started < 0.1
    finally:
        server.stop()


async def test_a_server_offers_a_bounded_number_of_tools(
    http_calendar: HttpCalendar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the cap, the rest of a server's tools are left out, with a note naming allow."""
    import backthink.tools.mcp as mcp_module

    monkeypatch.setattr(mcp_module, "MAX_TOOLS_PER_SERVER", 3)
    settings = McpServerSettings(url=http_calendar.url)
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools({"cal": settings}, stack=stack, timeout_s=START_S)
    assert len(tools) == 3
    assert [n for n in notes if n.startswith("mcp_tools_cut: cal: only 3")]


async def test_a_program_that_is_no_server_is_one_line_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A command that prints prose is refused at once, in one note and one log line."""
    chatty = McpServerSettings(
        command=[
            sys.executable,
            "-c",
            "import sys, time; print('hello, secret notes here'); sys.stdout.flush(); "
            "time.sleep(60)",
        ]
    )
    started = time.perf_counter()
    async with asyncio.timeout(TEST_S), AsyncExitStack() as stack:
        tools, notes = await open_mcp_tools({"notes": chatty}, stack=stack, timeout_s=START_S)
        decided = time.perf_counter() - started
    assert tools == []
    assert notes == [
        "mcp_unavailable: notes: not an MCP server: it wrote lines that are not JSON-RPC"
    ]
    assert decided < START_S / 2, "refused as soon as it spoke, not at the start timeout"
    logged = [record for record in caplog.records if record.name.startswith("mcp")]
    assert logged == [], [record.getMessage() for record in logged]
    assert "secret notes" not in caplog.text
