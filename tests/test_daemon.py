"""The daemon as systemd runs it: a real process, a local model endpoint, signals, pokes."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import READY_TIMEOUT_S, DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Reply

PUSH = "[我决定:push]\n我回来啦。"


class NotifyListener:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET, read in a thread."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifyListener]:
    """systemd's notify socket, as a test sees it."""
    listener = NotifyListener(tmp_path / "n.sock")
    yield listener
    listener.close()


def rounds(workdir: Workdir) -> list[dict[str, object]]:
    return json.loads(workdir.cli("rounds", "--json", "--limit", "100").stdout)  # type: ignore[no-any-return]


def test_daemon_lifecycle(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str], notify: NotifyListener
) -> None:
    """Startup greeting, heartbeats, READY/WATCHDOG/STOPPING, SIGTERM exits 0 with a summary."""
    fake.script(PUSH)
    fake.default_reply = "[我决定:no_push]"
    env = dict(daemon_env, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="400000")
    daemon = DaemonProcess(workdir, env)
    try:
        daemon.wait_for("daemon.ready")
        greeting = daemon.wait_for("round.finished")
        assert (greeting["trigger"], greeting["outcome"], greeting["reason"]) == (
            "startup",
            "delivered",
            "web",
        )
        daemon.wait_for("round.finished", count=3)
    finally:
        code = daemon.stop()
    assert code == 0, "".join(daemon.raw)
    stopped = daemon.wait_for("daemon.stopped")
    assert stopped["drained"] is True and isinstance(stopped["rounds"], int)
    assert stopped["rounds"] >= 3
    notify.close()
    states = [line for message in notify.messages for line in message.splitlines()]
    assert states[0] == "WATCHDOG=1" or states[0] == "READY=1"
    assert "READY=1" in states and states.count("WATCHDOG=1") >= 2
    assert states.index("READY=1") < states.index("STOPPING=1") == len(states) - 1
    recorded = rounds(workdir)
    triggers = [r["trigger"] for r in recorded]
    assert triggers.count("startup") == 1 and triggers.count("heartbeat") >= 2
    assert all(line.startswith("{") for line in daemon.raw), "".join(daemon.raw)


def test_poke_runs_a_round_now(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """poke TEXT runs a round in the daemon with TEXT as the trigger and prints its result."""
    fake.default_reply = "[我决定:no_push]"
    env = dict(
        daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h", BACKTHINK_SCHEDULE__STARTUP_GREETING="false"
    )
    daemon = DaemonProcess(workdir, env)
    try:
        daemon.wait_for("daemon.ready")
        workdir.env = env
        fake.script("[我决定:push]\n[紧急:warning]\n组会十分钟后开始，带上电脑。")
        out = json.loads(workdir.cli("poke", "日程：组会 10 分钟后开始").stdout)
        assert out["trigger"] == "日程：组会 10 分钟后开始"
        assert (out["outcome"], out["reason"]) == ("delivered", "web")
        prompt = fake.chat_requests[-1].body["messages"][-1]["content"]
        assert "触发：日程：组会 10 分钟后开始" in prompt
        finished = daemon.wait_for("round.finished")
        assert finished["trigger"] == "poke"  # the poke's text stays out of the log
    finally:
        assert daemon.stop() == 0
    proc = workdir.cli("poke", "again", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("backthink: no daemon is running")


@pytest.mark.timeout(150)  # ten daemon starts: slow on a loaded machine
def test_restart_storm_greets_once(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """Ten restarts within a minute: one greeting, one model call for it, nothing more."""
    fake.default_reply = PUSH
    env = dict(daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h")
    for i in range(10):
        daemon = DaemonProcess(workdir, env)
        try:
            daemon.wait_for("daemon.ready")
            if i == 0:
                daemon.wait_for("round.finished")
            else:
                daemon.wait_for("daemon.greeting_skipped")
        finally:
            assert daemon.stop() == 0
    recorded = rounds(workdir)
    assert [(r["trigger"], r["outcome"]) for r in recorded] == [("startup", "delivered")]
    assert len(fake.chat_requests) == 1


def stop_mid_round(
    workdir: Workdir, fake: FakeOpenAI, env: dict[str, str]
) -> tuple[int, DaemonProcess]:
    """Start the daemon, send SIGTERM once its startup round is waiting for the model."""
    daemon = DaemonProcess(workdir, env)
    try:
        daemon.wait_for("daemon.ready")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not fake.chat_requests and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        code = daemon.stop()
    return code, daemon


def test_sigterm_waits_for_the_running_round(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """SIGTERM mid-round: no new rounds, the running one finishes and is recorded, exit 0."""
    fake.script(Reply("[我决定:no_push]", delay_s=2.0))
    code, daemon = stop_mid_round(
        workdir, fake, dict(daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h")
    )
    assert code == 0
    stopping = daemon.wait_for("daemon.stopping")
    assert stopping["running_rounds"] == 1
    assert daemon.wait_for("daemon.stopped")["drained"] is True
    assert [(r["trigger"], r["reason"]) for r in rounds(workdir)] == [("startup", "no_push")]


def test_sigterm_past_the_drain_timeout_records_the_round_interrupted(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """A round that outlasts daemon.drain_timeout is cut off and recorded failed/interrupted."""
    fake.script(Reply("[我决定:no_push]", delay_s=30.0))
    env = dict(
        daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h", BACKTHINK_DAEMON__DRAIN_TIMEOUT="500ms"
    )
    code, daemon = stop_mid_round(workdir, fake, env)
    assert code == 0
    assert daemon.wait_for("daemon.stopped")["drained"] is False
    logged = rounds(workdir)
    assert [(r["trigger"], r["outcome"], r["reason"]) for r in logged] == [
        ("startup", "failed", "interrupted")
    ]
    assert "cut off by shutdown before it ended" in logged[0]["notes"]


def test_without_a_model_rounds_skip_and_the_greeting_waits(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """No endpoint: rounds end skipped/no_model; the next start with one still greets."""
    fake.default_reply = PUSH
    bare = {k: v for k, v in daemon_env.items() if k != "BACKTHINK_MODEL__BASE_URL"}
    bare["BACKTHINK_SCHEDULE__HEARTBEAT"] = "1h"
    daemon = DaemonProcess(workdir, bare)
    try:
        missing = daemon.wait_for("daemon.model_missing")
        assert "model.base_url" in str(missing["hint"])
        daemon.wait_for("daemon.greeting_waits")
        finished = daemon.wait_for("round.finished")
        assert (finished["outcome"], finished["reason"]) == ("skipped", "no_model")
    finally:
        assert daemon.stop() == 0
    assert not fake.chat_requests
    daemon = DaemonProcess(workdir, dict(daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h"))
    try:
        greeting = daemon.wait_for("round.finished")
        assert (greeting["trigger"], greeting["outcome"]) == ("startup", "delivered")
    finally:
        assert daemon.stop() == 0


def test_ready_names_the_next_heartbeat(workdir: Workdir, daemon_env: dict[str, str]) -> None:
    """daemon.ready's next heartbeat is the owner's heartbeat, the one `status` shows."""
    env = dict(
        daemon_env,
        BACKTHINK_SCHEDULE__HEARTBEAT="3h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
    )
    daemon = DaemonProcess(workdir, env)
    try:
        ready = daemon.wait_for("daemon.ready")
        workdir.env = env
        status = json.loads(workdir.cli("status", "--json").stdout)
    finally:
        assert daemon.stop() == 0
    assert ready["next_heartbeat"] == status["next_heartbeat"]


def test_a_second_daemon_is_refused_before_it_starts(
    workdir: Workdir, daemon_env: dict[str, str]
) -> None:
    """A second daemon on the same config says why and exits 1; the first logs no refusal."""
    env = dict(
        daemon_env,
        BACKTHINK_SCHEDULE__HEARTBEAT="1h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
    )
    first = DaemonProcess(workdir, env)
    try:
        first.wait_for("daemon.ready")
        second = DaemonProcess(workdir, env)
        code = second.proc.wait(timeout=READY_TIMEOUT_S)
        second.stop()
        assert code == 1
        said = "".join(second.raw)
        assert "another daemon is already listening" in said
        assert "daemon.started" not in said
    finally:
        assert first.stop() == 0
    assert not [e for e in first.seen if e.get("event") == "poke.refused"]
    assert '"poke.refused"' not in "".join(first.raw)
