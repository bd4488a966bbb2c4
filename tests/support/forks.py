"""`backthink` commands as real processes, forked from one interpreter that imported backthink once.

A command run as `python -m backthink ...` spends most of its second importing the
package and its libraries; the suite runs hundreds of them. The fork server
(support/forkserver.py) is one process, started once per test session, that
imports every backthink module and then waits. Each command is a fork of it: a real
process of its own, with its own pid, working folder, environment, standard
streams, exit code and signals, that runs `python -m backthink` from its entry
point as a fresh interpreter would, but without the imports.

A command whose environment would change how the interpreter itself starts
(`PYTHON*`, the locale, `LD_*`, libfaketime's variables) differs from the server's,
and runs in a fresh interpreter instead; so does every command when
`TESTS_FRESH_INTERPRETER=1` is set, for telling a fork's artefact from a real fault.
The tests of the interpreter's start itself (the README's commands, the wheel,
`init` on a new machine) start their own processes.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from support.forkserver import READY

START_TIMEOUT_S = 60.0  # seconds for the server to import backthink on a loaded machine
ANSWER_TIMEOUT_S = 30.0  # seconds for the server to fork and name the new pid
FRESH_ENV = "TESTS_FRESH_INTERPRETER"  # set to 1: every command in a fresh interpreter
# Variables read while the interpreter starts (encoding, flags, preloaded libraries,
# libfaketime): a command whose values differ cannot be a fork of this one.
INTERPRETER_VARS = ("PYTHON", "LC_", "LANG", "LD_", "FAKETIME", "DONT_FAKE")


class ForkedProcess:
    """A forked command, driven as a `subprocess.Popen` is: pid, signals, wait, poll."""

    def __init__(self, conn: socket.socket, pid: int, stdout: IO[str] | None = None) -> None:
        """Hold the connection on which the server will write the exit code."""
        self._conn = conn
        self._answer = b""
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code if the process ended, else None."""
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code (negative for a signal).

        Raises:
            subprocess.TimeoutExpired: the process still runs after `timeout` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self.returncode is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([self._conn], [], [], left)[0]:
                    raise subprocess.TimeoutExpired(["backthink"], timeout or 0)
                chunk = self._conn.recv(64)
                if not chunk:
                    raise RuntimeError("the fork server ended before the process did")
                self._answer += chunk
                if self._answer.endswith(b"\n"):
                    self.returncode = int(self._answer)
                    self._conn.close()
            return self.returncode

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the process, unless it ended already."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """Send SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send SIGKILL."""
        self.send_signal(signal.SIGKILL)


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(INTERPRETER_VARS)}


class ForkServer:
    """The server process, and the way to start commands from it."""

    def __init__(self) -> None:
        """Start the server and wait until it imported backthink and listens."""
        self._folder = tempfile.mkdtemp(prefix="backthink-fork-")
        self.path = os.path.join(self._folder, "fork.sock")
        self._log = Path(self._folder) / "server.log"
        self._env = dict(os.environ)
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("forkserver.py")), self.path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=self._env,
            )
        assert self._proc.stdout is not None
        ready = _readline_within(self._proc.stdout, START_TIMEOUT_S)
        if ready.strip() != READY:
            self.close()
            raise RuntimeError(f"the fork server did not start: {self._log.read_text()[-3000:]}")

    def can_fork(self, env: Mapping[str, str]) -> bool:
        """Whether a command with `env` may be a fork (else it needs a fresh interpreter)."""
        return (
            os.environ.get(FRESH_ENV) != "1"
            and self._proc.poll() is None
            and _interpreter_env(env) == _interpreter_env(self._env)
        )

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin: int,
        stdout: int,
        stderr: int,
        open_files: int | None = None,
        code: str | None = None,
    ) -> ForkedProcess:
        """Start `python -m backthink ARGV` (or `python -c CODE ARGV`) on these streams."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            header = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "code": code}
            data = json.dumps(header | {"open_files": open_files}).encode() + b"\n"
            socket.send_fds(conn, [data[:1]], [stdin, stdout, stderr])
            conn.sendall(data[1:])
            conn.settimeout(ANSWER_TIMEOUT_S)
            pid = b""
            while not pid.endswith(b"\n"):
                chunk = conn.recv(1)
                if not chunk:
                    raise RuntimeError("the fork server refused the request")
                pid += chunk
        except BaseException:
            conn.close()
            raise
        return ForkedProcess(conn, int(pid), None)

    def close(self) -> None:
        """Stop the server; commands still running are left to end by themselves."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _readline_within(stream: IO[str], timeout_s: float) -> str:
    """The stream's first line, or "" when none comes within `timeout_s` seconds."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0] if found else ""


def _pump(source: int, sink: list[bytes]) -> None:
    with os.fdopen(source, "rb") as stream:
        sink.append(stream.read())


def run(
    server: ForkServer | None,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    stdin: str | None = None,
    code: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m backthink ARGV` to its end, as `subprocess.run` with captured output would.

    A fork of `server` when it can be, else a fresh interpreter. With `code`, the command
    is `python -c CODE ARGV` instead.

    Raises:
        subprocess.TimeoutExpired: the command ran past `timeout_s` (it is killed).
    """
    command = [sys.executable, *(["-m", "backthink"] if code is None else ["-c", code]), *argv]
    if server is None or not server.can_fork(env):
        return subprocess.run(
            command,
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            input=stdin,
        )
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if stdin is not None else (_inherited_stdin(), -1)
    try:
        proc = server.spawn(
            argv, cwd=cwd, env=env, stdin=in_r, stdout=out_w, stderr=err_w, code=code
        )
    except BaseException:
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    outputs: dict[str, list[bytes]] = {"out": [], "err": []}
    pumps = [
        threading.Thread(target=_pump, args=(out_r, outputs["out"]), daemon=True),
        threading.Thread(target=_pump, args=(err_r, outputs["err"]), daemon=True),
    ]
    if in_w >= 0:
        pumps.append(threading.Thread(target=_feed, args=(in_w, stdin or ""), daemon=True))
    for pump in pumps:
        pump.start()
    try:
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise subprocess.TimeoutExpired(command, timeout_s) from None
    finally:
        for pump in pumps:
            pump.join(timeout_s)
    return subprocess.CompletedProcess(
        command, returncode, _text(outputs["out"]), _text(outputs["err"])
    )


def start(
    server: ForkServer | None,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    open_files: int | None = None,
) -> subprocess.Popen[str] | ForkedProcess:
    """Start `python -m backthink ARGV` with stdout and stderr on one pipe, as text.

    A fork of `server` when it can be, else a fresh interpreter. With `open_files`, the
    process runs under that limit of open files (soft and hard).
    """
    if server is None or not server.can_fork(env):
        command = [sys.executable, "-m", "backthink", *argv]
        if open_files is not None:
            command = [
                sys.executable,
                "-c",
                "import resource, runpy, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({open_files}, {open_files})); "
                f"sys.argv = ['backthink', *{list(argv)!r}]; "
                "runpy.run_module('backthink', run_name='__main__')",
            ]
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    out_r, out_w = os.pipe()
    stdin = _inherited_stdin()
    try:
        proc = server.spawn(
            argv, cwd=cwd, env=env, stdin=stdin, stdout=out_w, stderr=out_w, open_files=open_files
        )
    except BaseException:
        os.close(out_r)
        raise
    finally:
        os.close(stdin)
        os.close(out_w)
    proc.stdout = os.fdopen(out_r, "r", encoding=_ENCODING)
    return proc


def _inherited_stdin() -> int:
    """This process's standard input for a child, as Popen passes it; /dev/null if it has none."""
    try:
        return os.dup(0)
    except OSError:
        return os.open(os.devnull, os.O_RDONLY)


def _feed(fd: int, text: str) -> None:
    with os.fdopen(fd, "w", encoding=_ENCODING) as stream, contextlib.suppress(BrokenPipeError):
        stream.write(text)


def _text(chunks: list[bytes]) -> str:
    # As `subprocess.run(text=True)` decodes: the locale's encoding, universal newlines.
    data = b"".join(chunks).decode(_ENCODING)
    return data.replace("\r\n", "\n").replace("\r", "\n")


_ENCODING = locale.getpreferredencoding(False)  # what `subprocess.run(text=True)` uses
