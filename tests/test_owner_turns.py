"""A round yields to the owner: a relay question or a message in mid-round, a relay turn under way.

The relay stores the owner's question before it asks the upstream, so a
daemon killed during the call keeps it (a real `backthink run` killed with
SIGKILL while the fake upstream takes its time), and a round that starts
meanwhile sees the owner active. A window of `0s` turns the gate's own
activity check off: what is left is the registry of live turns.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx2
import pytest
from conftest import DaemonProcess, Workdir
from support.api_rig import WAIT_S, Rig, open_rig
from support.fake_openai import FakeOpenAI
from support.fake_script import Reply

from backthink.models import Outcome
from backthink.records import RoundRecord

PUSH = "[我决定:push]\n组会加油。"
LATER_PUSH = "[我决定:push]\n晚饭吃了吗？"
DELAY_S = 1.5  # seconds the upstream takes over the answer the test needs to overtake
STORE_HELD_S = 1.0  # seconds the test keeps the daemon's database locked for writing


async def watched(rig: Rig) -> None:
    """A client reads the session, so its channel (the session's) is connected for rounds."""
    async with rig.client() as c:
        assert (await c.get("/v1/messages")).status_code == 200


async def until_asked(fake: FakeOpenAI, count: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while len(fake.chat_requests) < count:  # noqa: ASYNC110 - another thread serves it
            await asyncio.sleep(0.01)


async def round_of(rig: Rig, trigger: str = "heartbeat") -> asyncio.Task[RoundRecord]:
    app = await rig.fleet.app("o")
    return asyncio.create_task(app.thinker.run_round("o", trigger))


def gate(window: str) -> dict[str, object]:
    return {"quiet_hours": "", "activity_window": window, "min_interval": "0s"}


@pytest.mark.parametrize("window", ["10m", "0s"])
async def test_a_round_overtaken_by_a_relay_question_stays_silent(
    tmp_path: Path, fake: FakeOpenAI, window: str
) -> None:
    """The owner asks through the relay while the round's model thinks: suppressed/owner_active."""
    async with open_rig(tmp_path, fake, gate=gate(window)) as rig:
        await watched(rig)
        fake.script(Reply(PUSH, delay_s=DELAY_S), "我在呢")
        thinking = await round_of(rig)
        await until_asked(fake, 1)
        async with rig.client() as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "我回来了"}]}
            assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
        record = await asyncio.wait_for(thinking, WAIT_S)
        assert (record.outcome, record.reason) == (Outcome.SUPPRESSED, "owner_active")
        assert record.prompt_tokens is not None  # it did call the model
        if window == "0s":
            # Once the turn is over a round may speak again: it was the turn that held it back.
            await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
            fake.script(LATER_PUSH)
            later = await asyncio.wait_for(await round_of(rig, "poke"), WAIT_S)
            assert (later.outcome, later.reason) == (Outcome.DELIVERED, "web")


@pytest.mark.parametrize("window", ["10m", "0s"])
async def test_a_round_during_a_relay_turn_skips_before_the_model(
    tmp_path: Path, fake: FakeOpenAI, window: str
) -> None:
    """A relay turn under way when a round starts: skipped/owner_active, no model call."""
    async with open_rig(tmp_path, fake, gate=gate(window)) as rig:
        await watched(rig)
        fake.script(Reply("我在呢", delay_s=DELAY_S))
        async with rig.client() as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "在吗"}]}
            asking = asyncio.create_task(c.post("/v1/chat/completions", json=body))
            await until_asked(fake, 1)
            record = await asyncio.wait_for(await round_of(rig), WAIT_S)
            assert (await asking).status_code == 200
    assert (record.outcome, record.reason) == (Outcome.SKIPPED, "owner_active")
    assert len(fake.chat_requests) == 1


async def test_a_message_handed_in_mid_round_silences_it(tmp_path: Path, fake: FakeOpenAI) -> None:
    """POST /v1/messages while the model thinks: the round ends suppressed/owner_active."""
    async with open_rig(tmp_path, fake, gate=gate("0s")) as rig:
        await watched(rig)
        fake.script(Reply(PUSH, delay_s=DELAY_S))
        thinking = await round_of(rig)
        await until_asked(fake, 1)
        async with rig.client() as c:
            sent = await c.post("/v1/messages", json={"role": "user", "text": "我到家了"})
            assert sent.status_code == 200
        record = await asyncio.wait_for(thinking, WAIT_S)
    assert (record.outcome, record.reason) == (Outcome.SUPPRESSED, "owner_active")


def stored_texts(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT role, text FROM message ORDER BY id").fetchall()


@pytest.mark.slow
def test_a_daemon_killed_during_a_relay_call_keeps_the_question(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    """The question is stored before the upstream is asked; SIGKILL mid-call keeps it."""
    workdir.write_config(
        """
[schedule]
heartbeat = "1h"
startup_greeting = false

[api]
listen = "127.0.0.1:0"

[channels.web]
type = "web"
"""
    )
    db = workdir.path / "bt.db"
    daemon = DaemonProcess(workdir, dict(workdir.env))
    sent: list[BaseException | int] = []
    try:
        url = str(daemon.wait_for("api.ready")["url"])
        fake.script(Reply("一个很慢的回答", delay_s=3 * WAIT_S))
        writer = sqlite3.connect(db, isolation_level=None, timeout=WAIT_S)
        writer.execute("BEGIN IMMEDIATE")  # the daemon cannot store anything for a while

        def ask() -> None:
            body = {"model": "m", "messages": [{"role": "user", "content": "别忘了我的问题"}]}
            try:
                answer = httpx2.post(f"{url}v1/chat/completions", json=body, timeout=3 * WAIT_S)
                sent.append(answer.status_code)
            except httpx2.HTTPError as exc:
                sent.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        time.sleep(STORE_HELD_S)
        # The question could not be stored yet, so the upstream has not been asked.
        assert fake.chat_requests == []
        writer.execute("ROLLBACK")
        writer.close()
        deadline = time.monotonic() + WAIT_S
        while not fake.chat_requests:
            assert time.monotonic() < deadline, "the upstream was never asked"
            time.sleep(0.02)
        assert stored_texts(db) == [("user", "别忘了我的问题")]
        status = json.loads(workdir.cli("status", "--json").stdout)
        assert status["turns_in_flight"] == {"rounds": 0, "relay": 1}
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(timeout=WAIT_S)
    finally:
        daemon.stop()
    assert stored_texts(db) == [("user", "别忘了我的问题")]
    asking.join(WAIT_S)
    assert sent and not isinstance(sent[0], int)  # the client saw the daemon die mid-call
