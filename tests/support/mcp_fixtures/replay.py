"""An MCP server over stdio that lists the tools a real server listed, saved in JSON files.

Usage: python replay.py FILE.json [FILE.json ...] [--only NAME ...]

Each file holds {"server", "package", "version", "license", "tools"}; every tool
is listed with its saved name, description and input schema, byte for byte, so
a client sees what the real server showed it, without Node or the network. A
call answers one line naming the tool and the arguments it got. `--only`
keeps just the named tools.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def saved_tools(files: list[Path], only: set[str]) -> list[mcp_types.Tool]:
    """The tools of `files` in their saved order (all of them unless `only` names some)."""
    tools: list[mcp_types.Tool] = []
    for path in files:
        for entry in json.loads(path.read_text(encoding="utf-8"))["tools"]:
            if only and entry["name"] not in only:
                continue
            tools.append(
                mcp_types.Tool(
                    name=entry["name"],
                    description=entry.get("description"),
                    input_schema=entry["inputSchema"],
                )
            )
    return tools


def replay_server(tools: list[mcp_types.Tool]) -> Server[Any]:
    """A server that lists `tools` and answers each call with what it was asked."""
    names = {tool.name for tool in tools}

    async def listed(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools)

    async def called(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        known = params.name in names
        args = json.dumps(params.arguments or {}, ensure_ascii=False, sort_keys=True)
        text = f"{params.name} called with {args}" if known else f"no tool {params.name}"
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text)], is_error=not known
        )

    return Server("replay", version="saved", on_list_tools=listed, on_call_tool=called)


async def serve(server: Server[Any]) -> None:
    """Serve over stdin and stdout until the client closes stdin."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    """Parse the arguments and serve."""
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    anyio.run(serve, replay_server(saved_tools(args.files, set(args.only))))


if __name__ == "__main__":
    main()
