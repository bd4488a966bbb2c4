"""The README's examples run: every `backthink` and `curl` command line, every TOML block.

The commands run in the order the README gives them, as a newcomer would: on a
machine whose only model server is the fake endpoint, with fake `systemctl` and
`loginctl` on PATH, and the daemon started once the API is configured. The
installing and `make` lines are covered elsewhere (test_wheel builds from an
archive of the checkout; CI runs `make test`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, DETECT_PORTS, ROOT, DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from test_init import clean_env
from test_service import FAKE_CTL

from backthink.config import Settings

README = ROOT / "README.md"
EXAMPLE_PORT = "8766"  # the API port the README's examples use
STREAM_S = 1.0  # seconds an event stream example is read before it is closed


def blocks(kind: str) -> list[str]:
    """The README's fenced blocks of one kind (`sh`, `toml`, `json`), in order."""
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^[ ]*```{kind}\n(.*?)^[ ]*```", text, re.MULTILINE | re.DOTALL)


def command_lines() -> list[str]:
    """Every command line of the sh blocks, continuations joined, comments and indent gone."""
    lines: list[str] = []
    for block in blocks("sh"):
        held = ""
        for raw in block.splitlines():
            line = raw.strip()
            if line.endswith("\\"):
                held += line[:-1] + " "
                continue
            line = held + line
            held = ""
            # A comment starts at "  #" (two spaces), as the README writes them.
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_every_toml_block_is_valid_configuration() -> None:
    """Each TOML example of the README loads as backthink's settings."""
    found = blocks("toml")
    assert len(found) >= 3
    for block in found:
        Settings.model_validate(tomllib.loads(block))


def test_the_readme_lists_only_commands_this_test_runs() -> None:
    """Every command line is a backthink, curl, install or make line: nothing goes untested."""
    for line in command_lines():
        program = line.split()[0]
        assert program in {"backthink", "curl", "pipx", "make"}, line


@pytest.mark.slow
@pytest.mark.timeout(240)  # a config, a service install, a daemon, API calls: many processes
def test_the_readme_commands_run_as_written(tmp_path: Path, fake: FakeOpenAI) -> None:
    """From init --detect to the event stream: each command exits 0 and says what it should."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("systemctl", "loginctl"):
        (bin_dir / name).write_text(FAKE_CTL, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    port = free_port()
    env = dict(
        clean_env(home),
        PATH=f"{Path(sys.executable).parent}:{bin_dir}:{os.environ['PATH']}",
        FAKE_LOG=str(tmp_path / "ctl.log"),
        BT=f"http://127.0.0.1:{port}",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
        BACKTHINK_SCHEDULE__HEARTBEAT="1h",
        **{DETECT_PORTS: str(fake.port)},
    )
    config = home / ".config/backthink/backthink.toml"
    daemon: DaemonProcess | None = None
    fake.default_reply = "[decision:no_push]"

    def run(line: str) -> subprocess.CompletedProcess[str]:
        argv = [
            re.sub(r"\$(\w+)", lambda m: env.get(m[1], m[0]), part) for part in shlex.split(line)
        ]
        if argv[0] == "curl":
            argv = [*argv[:1], "--max-time", str(STREAM_S), *argv[1:]]
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
        )
        streaming = argv[0] == "curl" and "-sN" in argv and proc.returncode == 28
        assert proc.returncode == 0 or streaming, f"{line}\n{proc.stdout}\n{proc.stderr}"
        return proc

    try:
        for line in command_lines():
            program = line.split()[0]
            if program in {"pipx", "make"}:
                continue
            if line.startswith("backthink owners token"):
                # The README's [api] block goes into the config first, on a free port.
                api = blocks("toml")[0].replace(EXAMPLE_PORT, str(port))
                config.write_text(config.read_text(encoding="utf-8") + "\n" + api)
                env["TOKEN"] = run(line).stdout.strip().split()[-1]
                assert env["TOKEN"].startswith("bt_")
                workdir = Workdir(tmp_path, env)
                daemon = DaemonProcess(workdir, env, config=config)
                daemon.wait_for("daemon.ready")
                continue
            proc = run(line)
            if line.startswith("backthink init"):
                assert f"found a model server at {fake.base_url}" in proc.stdout
                assert tomllib.loads(config.read_text())["model"]["base_url"] == fake.base_url
            elif line.startswith("backthink service install"):
                assert "installed" in proc.stdout
            elif "/v1/messages" in line:
                stored = json.loads(proc.stdout)["messages"]
                assert stored[0]["client_id"] == "chat-1"
            elif "/v1/events" in line:
                assert proc.stdout.startswith(":") or "event:" in proc.stdout or proc.stdout == ""
            elif line == "backthink messages list":
                assert "今晚想早点睡" in proc.stdout and "明天上午十点组会" in proc.stdout
    finally:
        if daemon is not None:
            assert daemon.stop() == 0, "".join(daemon.raw)
    assert daemon is not None, "the README never configured the API"
