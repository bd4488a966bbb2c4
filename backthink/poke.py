"""`backthink poke`: a Unix socket through which other programs ask the daemon for a round now.

Protocol: the client sends one JSON line `{"trigger": "...", "owner_id": "..."}`
(owner optional) and reads one JSON line back: the round's summary
(`round_id`, `trigger`, `outcome`, `reason`, `channel`, `decision`), or
`{"error": "..."}`. The socket file is created with mode 0600, so only the
daemon's own user can poke it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog

from backthink.errors import BackthinkError
from backthink.models import RoundRecord

log = structlog.get_logger("backthink.poke")

MAX_REQUEST_BYTES = 64 * 1024  # bytes; a trigger is one short line of text
PUBLIC_FIELDS = ("round_id", "trigger", "outcome", "reason", "channel", "decision")

RunRound = Callable[[str, str], Awaitable[RoundRecord]]


class NoDaemonError(BackthinkError):
    """No daemon listens on the socket."""


async def serve(path: Path, run_round: RunRound, default_owner: str) -> asyncio.Server:
    """Listen on `path`; each request runs one round and answers with its summary."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answer = await _answer(await reader.readline(), run_round, default_owner)
            writer.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; its round (if any) is recorded anyway
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    old_umask = os.umask(0o177)
    try:
        server = await asyncio.start_unix_server(handle, path=str(path), limit=MAX_REQUEST_BYTES)
    finally:
        os.umask(old_umask)
    return server


async def _answer(line: bytes, run_round: RunRound, default_owner: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
        trigger = str(request["trigger"]).strip()
        owner = str(request.get("owner_id") or default_owner)
    except (ValueError, KeyError, TypeError, AttributeError):
        return {"error": 'expected one JSON line like {"trigger": "..."}'}
    if not trigger:
        return {"error": "the trigger text is empty"}
    log.info("poke.received", owner_id=owner)
    try:
        record = await run_round(owner, trigger)
    except BackthinkError as exc:
        return {"error": str(exc)}
    summary = record.summary()
    return {key: summary[key] for key in PUBLIC_FIELDS}


def _remove_stale(path: Path) -> None:
    """Remove a socket file left by a daemon that died; refuse when one still listens."""
    if not path.exists():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink(missing_ok=True)
            return
    raise BackthinkError(f"another daemon is already listening on {path}")


async def poke(
    path: Path, trigger: str, *, owner_id: str | None, timeout_s: float
) -> dict[str, Any]:
    """Ask the daemon at `path` for a round now and return its answer.

    Raises:
        NoDaemonError: nothing listens on the socket.
        BackthinkError: the daemon did not answer in time, or answered an error.
    """
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        raise NoDaemonError(f"no daemon is running (nothing listens on {path})") from None
    try:
        request = {"trigger": trigger, "owner_id": owner_id}
        writer.write(json.dumps(request, ensure_ascii=False).encode() + b"\n")
        await writer.drain()
        try:
            line = await asyncio.wait_for(reader.readline(), timeout_s)
        except TimeoutError:
            raise BackthinkError(f"the daemon did not answer within {timeout_s:.0f}s") from None
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    if not line:
        raise BackthinkError("the daemon closed the connection without an answer")
    answer: dict[str, Any] = json.loads(line)
    if "error" in answer:
        raise BackthinkError(f"the daemon refused the poke: {answer['error']}")
    return answer
