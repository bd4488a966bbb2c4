"""MCP servers' tools for one round: connect, list, offer as NAME__tool, call, close.

Each server has an owner task that enters, and later leaves, its transport
and session: the SDK holds anyio cancel scopes there, which must be left by
the task that entered them, and a transport whose own task fails cancels the
task that entered it. So a failing server cancels only its owner, never the
round. The owners start together, so the servers start concurrently, and they
close together when the round's exit stack closes. A server that fails to
start, answer or list becomes a one-line note and the round goes on without
it. Names, descriptions and results come from outside programs: they are cut
short and never read as instructions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
import structlog
from anyio.abc import TaskGroup
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from backthink.config import McpServerSettings
from backthink.tools import Tool, ToolError, ToolSpec
from backthink.tools.mcp_reasons import (
    NOT_A_SERVER,
    NotAServerError,
    reason,
    start_reason,
    unavailable,
)
from backthink.tools.mcp_shapes import (
    MAX_LIST_PAGES,
    MAX_SCHEMA_CHARS,
    MAX_TOOLS_PER_SERVER,
    clean_schema,
    description,
    offered_name,
    render_result,
    short,
)

log = structlog.get_logger(__name__)


@dataclass
class _Server:
    """One connected server as its tools see it."""

    name: str
    session: ClientSession
    stopped: str | None = None
    """Why the server can no longer be called; set by the first call that finds it gone."""


class McpTool:
    """One tool of an MCP server, offered under a prefixed name."""

    def __init__(
        self, server: _Server, original_name: str, spec: ToolSpec, *, timeout_s: float
    ) -> None:
        """Call `original_name` on `server`, offered to the model as `spec`."""
        self._server = server
        self._original_name = original_name
        self._spec = spec
        self._timeout_s = timeout_s

    @property
    def spec(self) -> ToolSpec:
        """How the tool is offered to the model."""
        return self._spec

    @property
    def server(self) -> str:
        """The configured name of the server this tool belongs to."""
        return self._server.name

    @property
    def gone(self) -> bool:
        """Whether the tool's server stopped: it is no longer offered, and a call fails at once."""
        return self._server.stopped is not None

    @property
    def original_name(self) -> str:
        """The tool's name as its server gives it."""
        return self._original_name

    async def call(self, arguments: dict[str, Any]) -> str:
        """Call the tool on its server and render the result as text.

        Raises:
            ToolError: the tool reported an error, did not answer in time, or its server
                is gone (then every later call fails at once with the same reason).
        """
        server = self._server
        if server.stopped is not None:
            raise ToolError(f"server {server.name} stopped: {server.stopped}")
        try:
            result = await server.session.call_tool(
                self._original_name, arguments, read_timeout_seconds=self._timeout_s
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(f"no answer within {self._timeout_s:g} s") from exc
            if exc.code == CONNECTION_CLOSED:
                raise self._stopped("connection closed") from exc
            raise ToolError(f"server {server.name}: {short(exc.message)}") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise self._stopped("connection closed") from exc
        except (OSError, httpx2.HTTPError) as exc:
            raise self._stopped(reason(exc, self._timeout_s)) from exc
        except Exception as exc:  # an ExceptionGroup or a schema mismatch: never past the tool
            raise ToolError(f"server {server.name}: {reason(exc, self._timeout_s)}") from exc
        if not isinstance(result, mcp_types.CallToolResult):
            raise ToolError(f"server {server.name}: unexpected result")
        text = render_result(result)
        if result.is_error:
            raise ToolError(short(text) or "the tool failed")
        return text

    def _stopped(self, reason: str) -> ToolError:
        self._server.stopped = reason
        log.warning("mcp.stopped", server=self._server.name, reason=reason)
        return ToolError(
            f"server {self._server.name} stopped: {reason}",
            note=f"mcp_stopped: {self._server.name}: {reason}",
        )


async def open_mcp_tools(
    servers: Mapping[str, McpServerSettings],
    *,
    stack: AsyncExitStack,
    timeout_s: float,
    call_timeout_s: float | None = None,
    errlog_dir: Path | None = None,
) -> tuple[list[Tool], list[str]]:
    """Connect every server and return their tools, and a note for each that failed.

    The calling task enters one task group on `stack` and must close `stack`
    itself. Inside it, each server has an owner task that opens, and later
    closes, that server's transport and session, so a transport that fails
    cancels only its owner, never the round. Closing `stack` closes every server
    concurrently; it never raises for a server and is bounded by the SDK's
    shutdown (stdin closed, 2 s, SIGTERM to the process group, 2 s, SIGKILL).

    Args:
        servers: The `[tools.mcp.NAME]` sections, by name.
        stack: The round's exit stack; the servers live until it closes.
        timeout_s: Seconds for each server's whole start (connect, initialize, list).
        call_timeout_s: Seconds for each call; `timeout_s` when not given.
        errlog_dir: Where stdio servers' stderr goes, as `mcp-NAME.log`, appended;
            without it, stderr is discarded.

    Returns:
        The tools, in server order, and notes such as
        `mcp_unavailable: cal: command not found: nosuchprog`.
    """
    if not servers:
        return [], []
    call_timeout = timeout_s if call_timeout_s is None else call_timeout_s
    owners = [_Owner(name, settings) for name, settings in servers.items()]
    group = await stack.enter_async_context(_Owners(owners))
    for owner in owners:
        group.start_soon(owner.run, timeout_s, errlog_dir)
    for owner in owners:
        await owner.ready.wait()

    tools: list[Tool] = []
    notes: list[str] = []
    taken: set[str] = set()
    for owner in owners:
        if owner.failure is not None or owner.server is None:
            notes.append(unavailable(owner.name, owner.failure or "stopped at start"))
            continue
        allow = owner.settings.allow
        offered = 0
        for tool in owner.listing:
            if allow is not None and tool.name not in allow:
                continue
            parameters = clean_schema(tool.input_schema)
            if len(json.dumps(parameters)) > MAX_SCHEMA_CHARS:
                notes.append(short(f"mcp_tool_skipped: {owner.name}: a schema too large to offer"))
                continue
            if offered >= MAX_TOOLS_PER_SERVER:
                notes.append(
                    f"mcp_tools_cut: {owner.name}: only {MAX_TOOLS_PER_SERVER} of its tools "
                    "are offered; name the ones you want in allow"
                )
                break
            spec = ToolSpec(
                name=offered_name(owner.name, tool.name, taken),
                description=description(tool, owner.name),
                parameters=parameters,
            )
            taken.add(spec.name)
            offered += 1
            tools.append(McpTool(owner.server, tool.name, spec, timeout_s=call_timeout))
        log.info("mcp.ready", server=owner.name, tools=len(owner.listing))
    return tools, notes


class _Owner:
    """The task that opens one server, keeps it open for the round, and closes it."""

    def __init__(self, name: str, settings: McpServerSettings) -> None:
        self.name = name
        self.settings = settings
        self.ready = anyio.Event()
        """Set once the server is listed or has failed."""
        self.release = anyio.Event()
        """Set when the round is done with the server."""
        self.server: _Server | None = None
        self.listing: list[mcp_types.Tool] = []
        self.failure: str | None = None
        self.garbled = False
        """The program wrote a line that is not JSON-RPC: it is no MCP server."""
        self._starting: anyio.CancelScope | None = None

    async def heard(self, message: object) -> None:
        """The session's handler of what the server sends unasked, and of unreadable lines.

        The first unreadable line says the program is no MCP server: its start
        ends at once (with one line saying so, never the SDK's traceback);
        later in a round it is said once.
        """
        if not isinstance(message, Exception) or self.garbled:
            return
        self.garbled = True
        if self._starting is not None:
            self._starting.cancel()
        else:
            log.warning("mcp.garbled", server=self.name, reason=NOT_A_SERVER)

    async def run(self, timeout_s: float, errlog_dir: Path | None) -> None:
        """Open, list, wait for the release, close; never raises but for cancellation."""
        try:
            async with AsyncExitStack() as own:
                try:
                    errlog = errlog_dir / f"mcp-{self.name}.log" if errlog_dir else None
                    session = await _enter(self.settings, own, errlog, timeout_s, self.heard)
                    # Safe here too: this scope encloses only requests, no context the SDK entered.
                    with anyio.CancelScope() as self._starting:
                        self.listing = await _handshake(session, timeout_s)
                    self._starting = None
                    if self.garbled:
                        raise NotAServerError(NOT_A_SERVER)
                except Exception as exc:
                    self._fail(start_reason(exc, self.settings, timeout_s))
                    return  # leaving `own` closes what was opened, while the round goes on
                self.server = _Server(self.name, session)
                self.ready.set()
                await self.release.wait()
        except Exception as exc:
            # A transport's own task failed: its task group cancelled us and raised here.
            why = reason(exc, timeout_s)
            if not self.ready.is_set():
                self._fail(why)
            elif not self.release.is_set():
                log.warning("mcp.stopped", server=self.name, reason=why)
            if self.server is not None and self.server.stopped is None:
                self.server.stopped = why
        finally:
            self.ready.set()
            if self.server is not None and self.server.stopped is None:
                self.server.stopped = "closed"

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self.ready.set()


class _Owners:
    """The task group of the owners, entered on the round's stack.

    On exit it releases every server and waits for all of them to close. The
    round's own exception is kept out of the group: anyio would wrap it in an
    ExceptionGroup, and the round's caller would no longer recognise it.
    """

    def __init__(self, owners: list[_Owner]) -> None:
        self._owners = owners
        self._group = anyio.create_task_group()

    async def __aenter__(self) -> TaskGroup:
        return await self._group.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        for owner in self._owners:
            owner.release.set()
        if isinstance(exc, Exception):
            await self._group.__aexit__(None, None, None)
            return False  # the round's exception goes on as it was raised
        # Cancellation and interrupts are the group's to handle.
        return bool(await self._group.__aexit__(exc_type, exc, tb))


async def _enter(
    settings: McpServerSettings,
    own: AsyncExitStack,
    errlog: Path | None,
    timeout_s: float,
    heard: MessageHandlerFnT,
) -> ClientSession:
    """Open the transport and the session of one server on `own`."""
    if settings.command:
        params = StdioServerParameters(
            command=settings.command[0],
            args=settings.command[1:],
            env={key: value.get_secret_value() for key, value in settings.env.items()},
        )
        read, write = await own.enter_async_context(
            stdio_client(params, errlog=own.enter_context(_errlog(errlog)))
        )
    else:
        assert settings.url is not None  # the settings hold exactly one of the two
        # Every HTTP wait is bounded, so closing (a DELETE) cannot hang on a stuck server.
        client = await own.enter_async_context(
            create_mcp_http_client(timeout=httpx2.Timeout(timeout_s))
        )
        read, write = await own.enter_async_context(
            streamable_http_client(settings.url, http_client=client)
        )
    session = ClientSession(read, write, read_timeout_seconds=timeout_s, message_handler=heard)
    return await own.enter_async_context(session)


def _errlog(path: Path | None) -> TextIO:
    """A real file for a server's stderr: the child process writes to its descriptor."""
    if path is None:
        return open(os.devnull, "w")  # closed by the server's exit stack
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", encoding="utf-8")


async def _handshake(session: ClientSession, timeout_s: float) -> list[mcp_types.Tool]:
    """Initialize the session and list all its tools, within `timeout_s` in all."""
    tools: list[mcp_types.Tool] = []
    # Safe here: this scope encloses only requests, no context the SDK entered.
    with anyio.fail_after(timeout_s):
        await session.initialize()
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    return tools
