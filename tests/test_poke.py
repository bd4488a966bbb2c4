"""The poke socket: bounded requests, one JSON answer for every error, configured owners only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import Workdir
from support.settings import BARE, make_settings

from backthink.config import Settings
from backthink.errors import BackthinkError
from backthink.host import poke
from backthink.testing import FakeClock, ScriptedModel, VolatileRoundStore, make_rig

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
NO_PUSH = "[我决定:no_push]"
TIMEOUT_S = 20.0  # seconds for any one exchange on a loaded machine


@dataclass
class Served:
    path: Path
    rounds: VolatileRoundStore
    model: ScriptedModel


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """A poke server in this process, running real rounds for the owner "o"."""
    settings = make_settings(base=BARE)
    model = ScriptedModel()
    rig = make_rig(settings, model=model, clock=FakeClock(T0))
    path = tmp_path / "bt.sock"
    server = await poke.serve(path, rig.thinker.run_round, ["o"])
    try:
        yield Served(path, rig.rounds, model)
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), TIMEOUT_S)


async def test_a_2_mb_trigger_gets_one_json_error_and_the_server_goes_on(served: Served) -> None:
    """An oversized request is answered with one error object, then the next poke works."""
    with pytest.raises(BackthinkError, match=r"refused the poke: the request is longer than 16384"):
        await poke.poke(served.path, "长" * 2_000_000, owner_id=None, timeout_s=TIMEOUT_S)
    served.model.push(NO_PUSH)
    answer = await poke.poke(served.path, "日程：组会", owner_id=None, timeout_s=TIMEOUT_S)
    assert (answer["outcome"], answer["reason"]) == ("suppressed", "no_push")
    assert len(await served.rounds.list()) == 1


@pytest.mark.parametrize("ended", [True, False], ids=["with_line_break", "still_coming"])
async def test_a_17_kb_line_is_refused_at_once(served: Served, ended: bool) -> None:
    """The refusal comes as soon as the line is too long, never after the read timeout."""
    line = json.dumps({"trigger": "长" * 6_000}).encode() + (b"\n" if ended else b"")
    assert len(line) > poke.MAX_REQUEST_BYTES
    reader, writer = await asyncio.open_unix_connection(str(served.path))
    try:
        writer.write(line)
        await writer.drain()
        # The client keeps its side open and waits: well within the server's read timeout.
        answer = await asyncio.wait_for(reader.readline(), poke.READ_TIMEOUT_S / 4)
    finally:
        writer.close()
        await writer.wait_closed()
    assert json.loads(answer) == {"error": "the request is longer than 16384 bytes"}
    assert await served.rounds.list() == []


async def test_a_long_trigger_is_refused_before_any_round(served: Served) -> None:
    """A trigger past 500 characters is refused; no round runs."""
    with pytest.raises(BackthinkError, match=r"the trigger is longer than 500 characters"):
        await poke.poke(served.path, "x" * 501, owner_id=None, timeout_s=TIMEOUT_S)
    assert await served.rounds.list() == []


async def test_an_unknown_owner_is_refused(served: Served) -> None:
    """A poke for an owner the daemon does not serve runs no round."""
    with pytest.raises(BackthinkError, match=r"refused the poke: unknown owner 'evil'$"):
        await poke.poke(served.path, "hi", owner_id="evil", timeout_s=TIMEOUT_S)
    assert await served.rounds.list() == []


@pytest.mark.parametrize(
    "raw",
    [
        b"not json\n",
        b"[1, 2]\n",
        b'{"trigger": 5}\n',
        b'{"trigger": "hi", "owner_id": ["o"]}\n',
        b'{"trigger": "   "}\n',
        b"\xff\xfe\n",
        b'{"trigger": "cut off',
    ],
)
async def test_every_bad_request_gets_exactly_one_error_object(served: Served, raw: bytes) -> None:
    """Malformed lines are answered with one JSON object holding only "error"; no round runs."""
    reader, writer = await asyncio.open_unix_connection(str(served.path))
    try:
        writer.write(raw)
        await writer.drain()
        if not raw.endswith(b"\n"):
            writer.write_eof()
        data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()
        await writer.wait_closed()
    lines = data.splitlines()
    assert len(lines) == 1
    answer = json.loads(lines[0])
    assert list(answer) == ["error"] and answer["error"]
    assert await served.rounds.list() == []


@pytest.mark.parametrize(
    "args",
    [
        ("think", "--dry-run"),
        ("think",),
        ("rounds",),
        ("messages", "add", "--role", "user", "--text", "hi"),
        ("poke", "hi"),
    ],
)
def test_an_unknown_owner_on_the_command_line_is_a_usage_error(
    workdir: Workdir, args: tuple[str, ...]
) -> None:
    """--owner naming no configured owner exits 2 with one line, before doing anything."""
    proc = workdir.cli("--owner", "nobody-here", *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "backthink: unknown owner 'nobody-here' (owners: o)\n"
    assert json.loads(workdir.cli("rounds", "--json").stdout) == []


def test_a_daemon_with_no_enabled_owner_refuses_pokes_in_words() -> None:
    """Every owner disabled: a poke or a status request is refused, never a crash."""
    assert poke.read_request(b'{"trigger": "hi"}', []) == "no owner is enabled"
    assert poke.read_request(b'{"status": true}', []) == "no owner is enabled"


def test_a_queued_poke_refuses_the_triggers_the_socket_refuses() -> None:
    """The workers' poke (no daemon, PostgreSQL) checks its text as the daemon's socket does."""
    from backthink.host.queue import poke_queued

    settings = Settings.model_validate({"database": {"url": "postgresql://nobody@127.0.0.1:9/x"}})
    for text, problem in [("  ", "empty"), ("x" * (poke.MAX_TRIGGER_CHARS + 1), "longer")]:
        with pytest.raises(BackthinkError, match=problem):
            asyncio.run(poke_queued(settings, None, text, timeout_s=1))
