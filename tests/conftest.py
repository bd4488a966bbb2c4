"""Shared fixtures: a local chat-completions server, a working folder with a config, PostgreSQL."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from support import forks
from support.fake_openai import FakeOpenAI
from support.forks import ForkServer
from support.pgserver import PgServer, PgUnavailableError, start_server
from support.webhook_receiver import WebhookReceiver

ROOT = Path(__file__).resolve().parent.parent
# The gate every command-line test starts from: no quiet hours, so the hour of the run
# never decides an outcome. Tests that exercise quiet hours set them relative to now.
OPEN_GATE: dict[str, object] = {"quiet_hours": ""}
CLI_TIMEOUT_S = 60  # seconds for one command-line run
DETECT_PORTS = "BACKTHINK_DETECT_PORTS"
NO_SERVER_PORT = "9"  # the discard port: nothing listens there on a test machine


# The real user's folders that backthink reads and writes by default; no test may touch them.
REAL_FOLDERS = (
    Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "backthink",
    Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local/state") / "backthink",
)


def _snapshot(folder: Path) -> dict[str, float]:
    if not folder.exists():
        return {}
    return {str(p): p.stat().st_mtime for p in folder.rglob("*")}


def home_changed(folder: Path, seen: Mapping[str, float], now: Mapping[str, float]) -> str | None:
    """What changed in one of the real user's folders during the suite, said fairly, or None.

    The files are named, and the message allows that the change came from outside
    the suite: the user's own daemon keeps writing its database while tests run.
    """
    changed = sorted(p for p in seen.keys() | now.keys() if seen.get(p) != now.get(p))
    if not changed:
        return None
    return (
        f"the real user's {folder} changed during the suite: {', '.join(changed[:10])}. "
        "A test may have written there, or something outside the suite did "
        "(your own backthink daemon or an editor): run the suite again with it stopped."
    )


@pytest.fixture(scope="session", autouse=True)
def real_home_untouched() -> Iterator[None]:
    """The suite ends with the real user's config and state folders as it found them."""
    before = {folder: _snapshot(folder) for folder in REAL_FOLDERS}
    yield
    for folder, seen in before.items():
        problem = home_changed(folder, seen, _snapshot(folder))
        assert problem is None, problem


@pytest.fixture(autouse=True)
def private_folders(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test (and every process it starts) finds its config and state folders in tmp."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    # Looking for model servers on this machine asks a port nothing listens on, not
    # whatever happens to run on the usual ones.
    monkeypatch.setenv(DETECT_PORTS, NO_SERVER_PORT)


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeOpenAI]:
    """One fake endpoint per test session."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeOpenAI) -> FakeOpenAI:
    """The fake endpoint, reset for this test."""
    fake_server.reset()
    return fake_server


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    """One process with backthink imported, from which each command is forked."""
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway PostgreSQL server per test session; the tests that need it skip without it."""
    try:
        server = start_server()
    except PgUnavailableError as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database (psycopg driver) for this test."""
    name = pg_server.create_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)


@dataclass
class Workdir:
    """A folder with its own config, database and state file, and a way to run the CLI there."""

    path: Path
    env: dict[str, str]
    forks: ForkServer | None = None

    @property
    def config(self) -> Path:
        return self.path / "backthink.toml"

    def write_config(self, extra: str = "", *, gate: Mapping[str, object] | None = None) -> None:
        """Write the config: the shipped prompts, a fresh database, a stated gate, plus `extra`.

        The gate is always written out: quiet hours are off unless `gate` turns them on, so
        no test's outcome depends on the hour at which the suite runs. `extra` holds the
        other sections; a `[gate]` table belongs in `gate`, not in `extra`.
        """
        gate_lines = "\n".join(
            f"{key} = {json.dumps(value)}" for key, value in {**OPEN_GATE, **(gate or {})}.items()
        )
        self.config.write_text(
            f"""
[owner]
id = "o"
name = "开拓者"
timezone = "Asia/Shanghai"

[persona]
id = "cyrene"
name = "昔涟"

[database]
url = "sqlite+aiosqlite:///{self.path / "bt.db"}"

[prompt]
dir = "{ROOT / "backthink/prompts"}"

[state]
file = "{self.path / "state.json"}"

[daemon]
socket = "{self.path / "bt.sock"}"

[gate]
{gate_lines}
{extra}
""",
            encoding="utf-8",
        )

    def write_state(self, doc: dict[str, object]) -> None:
        """Write the state file, stamped with this process's clock.

        The kernel dates the file by the real clock, which differs from the clock the
        suite runs under when that one is moved (libfaketime in CI); a state file without
        `updated_at` is dated by its mtime, so the mtime is set from the same clock the
        commands will read.
        """
        path = self.path / "state.json"
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        now = time.time()
        os.utime(path, (now, now))

    def cli(
        self,
        *args: str,
        check: bool = True,
        stdin: str | None = None,
        timeout_s: float = CLI_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run `backthink --config <file> ARGS` as a real process (with `stdin` as its input).

        The process is a fork of the session's fork server (see support/forks.py).
        """
        proc = forks.run(
            self.forks,
            ["--config", str(self.config), *args],
            cwd=self.path,
            env=self.env,
            timeout_s=timeout_s,
            stdin=stdin,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"backthink {' '.join(args)}: exit {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def think_json(self, *args: str) -> dict[str, object]:
        proc = self.cli("think", "--json", *args)
        result: dict[str, object] = json.loads(proc.stdout)
        return result


@pytest.fixture
def workdir(tmp_path: Path, fake: FakeOpenAI, fork_server: ForkServer) -> Workdir:
    """A working folder whose config points at the fake endpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    env[DETECT_PORTS] = NO_SERVER_PORT
    env["BACKTHINK_MODEL__BASE_URL"] = fake.base_url
    env["BACKTHINK_MODEL__API_KEY"] = "sk-test-secret-0123456789"
    env["BACKTHINK_MODEL__NAME"] = "fake-model"
    env["BACKTHINK_MODEL__MAX_RETRIES"] = "0"
    env["BACKTHINK_MODEL__TIMEOUT_S"] = "5"
    w = Workdir(tmp_path, env, fork_server)
    w.write_config()
    return w


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A local webhook receiver on 127.0.0.1."""
    with WebhookReceiver() as r:
        yield r


READY_TIMEOUT_S = 30.0  # seconds for a daemon to start on a loaded machine


class DaemonProcess:
    """`backthink run` in a child process, its JSON log lines read as they come."""

    def __init__(
        self,
        workdir: Workdir,
        env: dict[str, str],
        config: Path | None = None,
        *,
        open_files: int | None = None,
    ) -> None:
        """Start the daemon; with `open_files`, under that limit of open files (soft and hard)."""
        args = ["--config", str(config or workdir.config), "run"]
        self.proc = forks.start(
            workdir.forks, args, cwd=workdir.path, env=env, open_files=open_files
        )
        self.lines: queue.Queue[dict[str, object]] = queue.Queue()
        self.seen: list[dict[str, object]] = []
        self.raw: list[str] = []
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.raw.append(line)
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"event": "unparsed", "line": line})

    def wait_for(
        self, event: str, *, count: int = 1, timeout_s: float = READY_TIMEOUT_S
    ) -> dict[str, object]:
        """Block until the `count`-th log line with this event arrives."""
        deadline = time.monotonic() + timeout_s
        found = [e for e in self.seen if e.get("event") == event]
        while len(found) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {event} x{count} in time; log:\n{''.join(self.raw)}")
            try:
                entry = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(entry)
            if entry.get("event") == event:
                found.append(entry)
        return found[-1]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send a signal and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self._reader.join(timeout=10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@pytest.fixture
def daemon_env(workdir: Workdir) -> dict[str, str]:
    """Environment for a fast daemon: 1 s heartbeats, no jitter, no quiet hours."""
    workdir.write_config(gate={"default_channel": "web", "min_interval": "0s"})
    return dict(
        workdir.env,
        BACKTHINK_SCHEDULE__HEARTBEAT="1s",
        BACKTHINK_SCHEDULE__JITTER="0s",
        BACKTHINK_DAEMON__SOCKET=str(workdir.path / "bt.sock"),
    )
