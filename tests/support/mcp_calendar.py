"""A real MCP server for tests: a calendar with a fixed agenda, and tools that fail on purpose.

Run over stdio (`python tests/support/mcp_calendar.py`) or streamable HTTP on loopback
(`--http PORT`). The agenda is a JSON list of {"at": ISO time, "title": ...},
from `--agenda` or the CALENDAR_AGENDA variable. `--pid-file` records the
process id, `--exit` quits before speaking, `--mute` never answers and ignores
its stdin closing.
"""

import argparse
import json
import os
import sys
import time
from datetime import datetime
from typing import Any

DEFAULT_AGENDA = [
    {"at": "2031-05-06T09:00:00+00:00", "title": "Dentist"},
    {"at": "2031-05-06T18:30:00+00:00", "title": "Choir rehearsal"},
    {"at": "2031-05-08T12:00:00+00:00", "title": "Lunch with Mei"},
]
LONG_NAME = "an_unusually_long_tool_name_that_goes_past_the_sixty_four_character_cap"


def main() -> None:
    """Parse the arguments and serve until stdin closes (stdio) or the process is killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--agenda")
    parser.add_argument("--pid-file")
    parser.add_argument("--exit", action="store_true")
    parser.add_argument("--mute", action="store_true")
    args = parser.parse_args()
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if args.exit:
        print("calendar: refusing to start", file=sys.stderr)
        sys.exit(2)
    if args.mute:
        time.sleep(3600)
    agenda = json.loads(args.agenda or os.environ.get("CALENDAR_AGENDA") or "null")
    server = build(agenda if agenda is not None else DEFAULT_AGENDA)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


def build(agenda: list[dict[str, str]]) -> Any:
    """The server with its tools over `agenda`."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, ImageContent, TextContent

    events = sorted(agenda, key=lambda e: e["at"])
    mcp = MCPServer("calendar")

    @mcp.tool()
    def agenda_for(day: str) -> str:
        """The owner's appointments on one day.

        Args:
            day: the day as YYYY-MM-DD.
        """
        items = [e for e in events if e["at"][:10] == day]
        if not items:
            return f"nothing on {day}"
        return "\n".join(f"{e['at'][11:16]} {e['title']}" for e in items)

    @mcp.tool()
    def next_events(after: str, n: int = 2) -> list[dict[str, str]]:
        """The next `n` appointments after a time (ISO 8601)."""
        start = datetime.fromisoformat(after)
        return [e for e in events if datetime.fromisoformat(e["at"]) > start][:n]

    @mcp.tool(name="week.summary", description="  A   summary\n\n of  the week.  " * 40)
    def week_summary(week: str) -> str:
        return f"{len(events)} events in week {week}"

    @mcp.tool(name=LONG_NAME)
    def long_name() -> str:
        """A tool whose name is too long to offer unchanged."""
        return "long"

    @mcp.tool()
    async def slow(seconds: float) -> str:
        """Answer after a while."""
        await anyio.sleep(seconds)
        return "done"

    @mcp.tool()
    def boom() -> str:
        """Always fails."""
        raise RuntimeError("the calendar is on fire")

    @mcp.tool()
    def crash() -> str:
        """Kill the server in the middle of the call."""
        os._exit(3)

    @mcp.tool()
    def huge(chars: int) -> str:
        """A very long answer."""
        return "x" * chars

    @mcp.tool()
    def picture() -> CallToolResult:
        """A caption and a tiny image."""
        return CallToolResult(
            content=[
                TextContent(text="a red dot"),
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
            ]
        )

    @mcp.tool()
    def structured_only() -> CallToolResult:
        """Structured content with no text block."""
        return CallToolResult(content=[], structured_content={"free": ["10:00", "14:00"]})

    return mcp


if __name__ == "__main__":
    main()
