"""Two `backthink worker` processes take the same owner: the second round meets the first's lock.

A worker frozen (SIGSTOP) mid-round stops telling the database it is alive;
its round goes back in the queue and another worker takes it while the
frozen one still holds the owner. The second run ends `skipped/busy` under
an id of its own, without calling the model; thawed, the first run ends and
keeps the slot's id.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from conftest import ROOT
from support.fake_openai import FakeOpenAI
from support.fake_script import Reply
from test_worker import Worker, all_rounds

from backthink.host.queue import REAP_S, STALLED_S

NO_PUSH = "[我决定:no_push]"
REPLY_DELAY_S = STALLED_S + 2 * REAP_S + 6  # the first run's answer outlasts its requeue
WAIT_S = 60.0  # seconds a step may take on a loaded machine


def write_config(path: Path, url: str, base_url: str) -> Path:
    config = path / "backthink.toml"
    config.write_text(
        f"""
[owner]
id = "o"
timezone = "UTC"

[persona]
id = "cyrene"

[model]
base_url = "{base_url}"
api_key = "sk-test"
name = "fake-model"
max_retries = 0
timeout_s = {3 * REPLY_DELAY_S}

[database]
url = "{url}"

[prompt]
dir = "{ROOT / "backthink/prompts"}"

[state]
file = ""

[schedule]
heartbeat = "1h"
startup_greeting = true

[gate]
quiet_hours = ""

[memory]
enabled = false

[tools]
enabled = false

[daemon]
socket = "{path / "unused.sock"}"
""",
        encoding="utf-8",
    )
    return config


def until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_requeued_round_meets_its_frozen_first_run(
    tmp_path: Path, pg_url: str, fake: FakeOpenAI
) -> None:
    """The greeting runs once: the requeued copy ends skipped/busy and asks no model."""
    fake.script(Reply(NO_PUSH, delay_s=REPLY_DELAY_S), NO_PUSH)
    config = write_config(tmp_path, pg_url, fake.base_url)
    first = Worker(config, tmp_path / "first.log")
    second: Worker | None = None
    try:
        until(lambda: len(fake.chat_requests) == 1, "the first worker never asked the model")
        first.proc.send_signal(signal.SIGSTOP)
        second = Worker(config, tmp_path / "second.log")
        until(lambda: second.events("round.finished"), "the requeued round never ran")
        first.proc.send_signal(signal.SIGCONT)
        until(lambda: first.events("round.finished"), "the first run never ended")
    finally:
        if first.proc.poll() is None:
            first.proc.send_signal(signal.SIGCONT)
        first.stop()
        if second is not None:
            second.stop()
    assert len(fake.chat_requests) == 1
    (busy,) = second.events("round.finished")
    assert (busy["outcome"], busy["reason"]) == ("skipped", "busy")
    rounds = {r.id: r for r in asyncio.run(all_rounds(pg_url))}
    (greeted,) = [r for r in rounds.values() if r.reason == "no_push"]
    (skipped,) = [r for r in rounds.values() if r.reason == "busy"]
    assert any(greeted.id in note for note in skipped.notes)
