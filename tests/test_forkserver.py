"""The fork server's commands behave as fresh `python -m backthink` processes do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import forks
from support.forks import FRESH_ENV, ForkServer

TIMEOUT_S = 30.0  # seconds for one short command on a loaded machine

# Prints what a process was given: folder, environment, argv, path, zone, streams, open fds.
PROBE = """
import json, os, sys, time
print(json.dumps({
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "argv": sys.argv,
    "path0": sys.path[0],
    "tzname": list(time.tzname),
    "stdin": sys.stdin.read(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
}))
"""


def probe(
    server: ForkServer | None, tmp_path: Path, env: dict[str, str], stdin: str = ""
) -> dict[str, object]:
    proc = forks.run(
        server,
        ["one", "two"],
        cwd=tmp_path,
        env=env,
        timeout_s=TIMEOUT_S,
        stdin=stdin,
        code=PROBE,
    )
    assert proc.returncode == 0, proc.stderr
    seen: dict[str, object] = json.loads(proc.stdout)
    return seen


def test_a_fork_is_given_what_a_fresh_interpreter_is(
    fork_server: ForkServer, tmp_path: Path
) -> None:
    """Folder, exact environment, argv, sys.path[0], TZ, stdin and open fds match a fresh one."""
    env = {k: v for k, v in os.environ.items() if k != "TZ"} | {"TZ": "Asia/Shanghai", "X": "1"}
    forked = probe(fork_server, tmp_path, env, stdin="从标准输入\n")
    fresh = probe(None, tmp_path, env, stdin="从标准输入\n")
    # The same open descriptors too: nothing of the server's is inherited (under
    # libfaketime both also hold the one it opens).
    assert forked == fresh
    assert forked["cwd"] == str(tmp_path) and forked["env"] == env
    assert forked["argv"] == ["-c", "one", "two"] and forked["stdin"] == "从标准输入\n"
    assert forked["tzname"] == ["CST", "CST"]
    assert forked["fds"][:4] == [0, 1, 2, 3]  # the streams, and the listing's own


@pytest.mark.parametrize(
    "args",
    [["--version"], ["--bogus"], ["--config", "missing.toml", "rounds"], ["rounds", "--help"]],
)
def test_a_forked_command_answers_as_a_fresh_one(
    fork_server: ForkServer, tmp_path: Path, args: list[str]
) -> None:
    """Exit code, stdout and stderr of `backthink ARGS` are those of a fresh interpreter."""
    env = dict(os.environ)
    forked = forks.run(fork_server, args, cwd=tmp_path, env=env, timeout_s=TIMEOUT_S)
    fresh = forks.run(None, args, cwd=tmp_path, env=env, timeout_s=TIMEOUT_S)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [("import sys; sys.exit(3)", 3), ("raise ValueError('x')", 1), ("pass", 0)],
)
def test_exit_codes_are_the_interpreters(
    fork_server: ForkServer, tmp_path: Path, code: str, expected: int
) -> None:
    """sys.exit's code, 1 with a traceback for an uncaught exception, 0 at the end."""
    proc = forks.run(
        fork_server, [], cwd=tmp_path, env=dict(os.environ), timeout_s=TIMEOUT_S, code=code
    )
    assert proc.returncode == expected
    assert ("Traceback" in proc.stderr) == (expected == 1)


def test_a_signalled_fork_waits_polls_and_reports_the_signal(
    fork_server: ForkServer, tmp_path: Path
) -> None:
    """A running fork polls None and times out a wait; killed, its code is minus the signal."""
    out_r, out_w = os.pipe()
    try:
        proc = fork_server.spawn(
            [],
            cwd=tmp_path,
            env=dict(os.environ),
            stdin=0,
            stdout=out_w,
            stderr=out_w,
            code="import time; print('up', flush=True); time.sleep(60)",
        )
    finally:
        os.close(out_w)
    with os.fdopen(out_r) as out:
        assert out.readline() == "up\n"
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=TIMEOUT_S) == -signal.SIGKILL
        assert proc.poll() == -signal.SIGKILL


def test_an_interpreter_variable_or_the_switch_means_a_fresh_interpreter(
    fork_server: ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another PYTHON*/locale/LD_* value, or TESTS_FRESH_INTERPRETER=1, is never forked."""
    env = dict(os.environ)
    assert fork_server.can_fork(env)
    assert not fork_server.can_fork(env | {"PYTHONIOENCODING": "latin-1"})
    assert not fork_server.can_fork(env | {"LC_ALL": "xx_XX.unheard-of"})
    assert not fork_server.can_fork(env | {"LD_PRELOAD": sys.executable})
    monkeypatch.setenv(FRESH_ENV, "1")
    assert not fork_server.can_fork(env)
