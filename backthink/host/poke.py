"""`backthink poke`: a Unix socket through which other programs ask the daemon for a round now.

Protocol: the client sends one JSON line `{"trigger": "...", "owner_id": "..."}`
(owner optional) and reads one JSON line back: the round's summary
(`round_id`, `trigger`, `outcome`, `reason`, `channel`, `decision`), or
`{"error": "..."}`. A status request `{"status": true, "owner_id": "..."}`
runs no round; it is answered with what only the running daemon knows
(`{"running": true, "next_heartbeat", "channels"}`), for `backthink status`.
The line is at most `MAX_REQUEST_BYTES`, the trigger at most
`MAX_TRIGGER_CHARS`, and the owner one the daemon serves; every refusal
is such an error object, never a dropped connection. The socket file is
created with mode 0600, so only the daemon's own user can poke it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, ValidationError

from backthink.errors import BackthinkError
from backthink.host.descriptors import StormLog
from backthink.host.live import Live
from backthink.records import RoundRecord

log = structlog.get_logger(__name__)

MAX_REQUEST_BYTES = 16 * 1024  # bytes of the one request line
MAX_TRIGGER_CHARS = 500  # characters; a trigger is one short line of text
READ_TIMEOUT_S = 10.0  # seconds a client has to send its request line
# bytes of an oversized request read and thrown away, so the client gets to read
# its answer instead of a reset connection; past this the connection is closed
DISCARD_MAX_BYTES = 64 * 1024 * 1024
DISCARD_CHUNK = 64 * 1024  # bytes per read while discarding
BAD_REQUEST = 'expected one JSON line like {"trigger": "..."}'
PUBLIC_FIELDS = ("round_id", "trigger", "outcome", "reason", "channel", "decision")

STATUS_TIMEOUT_S = 3.0  # seconds `backthink status` waits for the daemon's answer
MAX_CONNECTIONS = 64  # connections open at once; past it the oldest idle one is dropped
BACKLOG = 512  # connections the kernel queues before the daemon accepts them
CONNECT_RETRY_S = 0.05  # seconds between tries while the daemon's queue is full
CONNECT_PATIENCE_S = 5.0  # seconds a command keeps trying a full queue

RunRound = Callable[[str, str], Awaitable[RoundRecord]]


class NoDaemonError(BackthinkError):
    """No daemon listens on the socket."""


async def serve(
    path: Path, run_round: RunRound, owners: Sequence[str], *, status: Live | None = None
) -> asyncio.Server:
    """Listen on `path`; each request runs one round and answers with its summary.

    Args:
        path: the socket file.
        run_round: runs one round for (owner, trigger).
        owners: the owners rounds may run for, the default first; read at every
            request, so the caller may change the list while serving.
        status: answers a status request for an owner (None: status requests are refused).
    """
    allowed = owners
    # Each open connection, oldest first, and whether its request line is in (then
    # it is being served). Past MAX_CONNECTIONS the oldest one still sending nothing
    # is dropped, so idle connections, however many, never keep the owner's own
    # commands out.
    open_now: dict[asyncio.StreamWriter, bool] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(open_now) >= MAX_CONNECTIONS:
            idle = next((w for w, serving in open_now.items() if not serving), None)
            if idle is None:
                _answer(writer, _refuse(f"the daemon is serving {len(open_now)} requests already"))
                writer.close()
                return
            open_now.pop(idle)
            idle.transport.abort()
            dropped.note(asyncio.get_running_loop().time(), cap=MAX_CONNECTIONS)
        open_now[writer] = False
        try:
            line = await _read_line(reader)
            open_now[writer] = True
            if isinstance(line, _TooLong):
                # Refused as soon as it is known to be too long; the rest of the line is
                # read after the answer, so the client reads it rather than a reset.
                _answer(writer, _refuse(f"the request is longer than {MAX_REQUEST_BYTES} bytes"))
                await writer.drain()
                if not line.ended:
                    await _discard_line(reader)
                return
            answer = await _serve_one(line, run_round, allowed, status)
            if answer is not None:
                _answer(writer, answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; its round (if any) is recorded anyway
        finally:
            open_now.pop(writer, None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    dropped = StormLog("poke.connections_dropped")
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    old_umask = os.umask(0o177)
    try:
        server = await asyncio.start_unix_server(
            handle, path=str(path), limit=MAX_REQUEST_BYTES, backlog=BACKLOG
        )
    finally:
        os.umask(old_umask)
    return server


@dataclass(frozen=True)
class _TooLong:
    """A request line past `MAX_REQUEST_BYTES`; `ended` when its line break was read too."""

    ended: bool


@dataclass(frozen=True)
class _NoLine:
    """No request line came within `READ_TIMEOUT_S`."""


async def _read_line(reader: asyncio.StreamReader) -> bytes | _TooLong | _NoLine:
    """The request line (what came before end of file, if no line break), read in chunks.

    It is judged chunk by chunk, so a line is known to be too long as soon as
    `MAX_REQUEST_BYTES` of it arrived, whether its end came with them or not.
    """
    line = bytearray()
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            while True:
                chunk = await reader.read(DISCARD_CHUNK)
                if not chunk:
                    return bytes(line)
                end = chunk.find(b"\n")
                line += chunk if end < 0 else chunk[: end + 1]
                if len(line) > MAX_REQUEST_BYTES:
                    return _TooLong(ended=end >= 0)
                if end >= 0:
                    return bytes(line)
    except TimeoutError:
        return _NoLine()


def _answer(writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
    writer.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")


async def _serve_one(
    line: bytes | _NoLine, run_round: RunRound, owners: Sequence[str], status: Live | None
) -> dict[str, Any] | None:
    if isinstance(line, _NoLine):
        return _refuse(f"no request line within {READ_TIMEOUT_S:g} s")
    if not line:
        # Connected and closed without a word: a second daemon checking that this one
        # is alive. Nothing to answer, and nothing was refused.
        log.debug("poke.probed")
        return None
    asked = read_request(line, owners)
    if isinstance(asked, str):
        return _refuse(asked)
    if isinstance(asked, StatusRequest):
        if status is None:
            return _refuse("this daemon does not answer status requests")
        try:
            return {"running": True, **status(asked.owner_id).to_json()}
        except Exception:
            log.exception("poke.status_crashed", owner_id=asked.owner_id)
            return {"error": "internal error: no status"}
    owner, trigger = asked.owner_id, asked.trigger
    log.info("poke.received", owner_id=owner)
    try:
        record = await run_round(owner, trigger)
    except BackthinkError as exc:
        return {"error": str(exc)}
    except Exception:
        # run_round records its own failures; anything reaching here is a bug, and
        # the client still gets an answer rather than a closed socket.
        log.exception("poke.crashed", owner_id=owner)
        return {"error": "internal error: the round could not run"}
    summary = record.summary()
    return {key: summary[key] for key in PUBLIC_FIELDS}


class _Line(BaseModel):
    """One request line as it arrives; each field is checked where it is read."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    trigger: object = None
    owner_id: object = None
    status: object = None


@dataclass(frozen=True)
class PokeRequest:
    """A request for a round now, for one owner, with a trigger text."""

    owner_id: str
    trigger: str


@dataclass(frozen=True)
class StatusRequest:
    """A request for the daemon's status about one owner; it runs no round."""

    owner_id: str


def read_request(line: bytes, owners: Sequence[str]) -> PokeRequest | StatusRequest | str:
    """Read one request line into what it asks for, or say why it is refused."""
    try:
        request = _Line.model_validate_json(line)
    except ValidationError:
        return BAD_REQUEST
    is_status = request.status is True
    if not is_status and not isinstance(request.trigger, str):
        return BAD_REQUEST
    if not owners:
        return "no owner is enabled"
    owner = request.owner_id or owners[0]
    if not isinstance(owner, str):
        return "owner_id must be a string"
    if owner not in owners:
        return f"unknown owner {owner[:64]!r}"
    if is_status:
        return StatusRequest(owner)
    assert isinstance(request.trigger, str)
    trigger = request.trigger.strip()
    problem = trigger_problem(trigger)
    return PokeRequest(owner, trigger) if problem is None else problem


def trigger_problem(trigger: str) -> str | None:
    """Why a poke's trigger text is refused (empty, too long), or None when it may run."""
    if not trigger.strip():
        return "the trigger text is empty"
    if len(trigger) > MAX_TRIGGER_CHARS:
        return f"the trigger is longer than {MAX_TRIGGER_CHARS} characters"
    return None


async def _discard_line(reader: asyncio.StreamReader) -> None:
    """Read and drop input up to the end of the current line, within bounds of size and time."""
    left = DISCARD_MAX_BYTES
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            while left > 0:
                chunk = await reader.read(DISCARD_CHUNK)
                if not chunk or b"\n" in chunk:
                    return
                left -= len(chunk)
    except TimeoutError:
        return


async def _connect(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the daemon's socket, trying again for a while when its queue is full.

    A Unix socket whose queue is full refuses at once (EAGAIN) instead of
    waiting as TCP does; the daemon drains it within moments, so a command
    tries again rather than failing.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONNECT_PATIENCE_S
    while True:
        try:
            return await asyncio.open_unix_connection(str(path))
        except BlockingIOError:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(CONNECT_RETRY_S)


def _refuse(error: str) -> dict[str, Any]:
    log.warning("poke.refused", error=error)
    return {"error": error}


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
        reader, writer = await _connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        raise NoDaemonError(f"no daemon is running (nothing listens on {path})") from None
    try:
        request = {"trigger": trigger, "owner_id": owner_id}
        try:
            writer.write(json.dumps(request, ensure_ascii=False).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), timeout_s)
        except TimeoutError:
            raise BackthinkError(f"the daemon did not answer within {timeout_s:.0f}s") from None
        except (ConnectionError, ValueError) as exc:
            raise BackthinkError(f"the daemon closed the connection: {exc}") from None
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


async def ask_status(
    path: Path, *, owner_id: str | None, timeout_s: float
) -> dict[str, Any] | None:
    """Ask the daemon at `path` what only it knows about an owner; None when none answers.

    A daemon that does not answer in time, or answers something else than a
    status object, counts as not running: `backthink status` must not hang.
    """
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await _connect(path)
            try:
                request = {"status": True, "owner_id": owner_id}
                writer.write(json.dumps(request, ensure_ascii=False).encode() + b"\n")
                await writer.drain()
                line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
    except (OSError, TimeoutError, ValueError):
        return None
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("running") is not True:
        log.debug("poke.status_refused", error=str(answer)[:200])
        return None
    return answer
