"""Why an MCP server could not serve, in one short line: no URLs, arguments or environment.

Also the one place that knows how the SDK reports a line it cannot read: that
report (a traceback, with the program's output in it, naming no server) is
dropped, and the server's owner says it in one line naming the server.
"""

from __future__ import annotations

import logging

import httpx2
import structlog
from mcp import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from backthink.config import McpServerSettings
from backthink.tools.mcp_shapes import MAX_NOTE_CHARS, short

log = structlog.get_logger(__name__)

NOT_A_SERVER = "not an MCP server: it wrote lines that are not JSON-RPC"
_SDK_PARSE_FAILURE = "Failed to parse JSONRPC message from server"
"""What the SDK logs, with a traceback and the line itself, for each line it cannot read."""


class NotAServerError(Exception):
    """The program wrote something else than JSON-RPC on its stdout."""


class _QuietParseFailures(logging.Filter):
    """Drops the SDK's report of an unreadable line; the server's owner says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _SDK_PARSE_FAILURE


_SDK_STDIO_LOG = logging.getLogger("mcp.client.stdio")
if not any(isinstance(f, _QuietParseFailures) for f in _SDK_STDIO_LOG.filters):
    # The SDK's record names no server and carries the program's output: it is
    # replaced by one line of ours naming the server (`heard`).
    _SDK_STDIO_LOG.addFilter(_QuietParseFailures())


def unavailable(name: str, reason: str) -> str:
    note = short(f"mcp_unavailable: {name}: {reason}", MAX_NOTE_CHARS)
    log.warning("mcp.unavailable", server=name, reason=reason)
    return note


def start_reason(exc: Exception, settings: McpServerSettings, timeout_s: float) -> str:
    """Why a server could not be started: the program's name, never its arguments or env."""
    if isinstance(exc, NotAServerError):
        return str(exc)
    program = short(settings.command[0], 60) if settings.command else ""
    if isinstance(exc, FileNotFoundError) and program:
        return f"command not found: {program}"
    if isinstance(exc, PermissionError) and program:
        return f"command not executable: {program}"
    return reason(exc, timeout_s)


def reason(exc: BaseException, timeout_s: float) -> str:
    """A short reason for a failure, without URLs, arguments or environment values."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, MCPError):
        if exc.code == REQUEST_TIMEOUT:
            return f"no answer within {timeout_s:g} s"
        if exc.code == CONNECTION_CLOSED:
            return "connection closed (the server exited?)"
        return short(exc.message, 100)
    if isinstance(exc, httpx2.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx2.TimeoutException):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, OSError) and exc.strerror:
        return short(exc.strerror, 100)
    return type(exc).__name__
