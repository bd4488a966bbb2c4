"""The fork server: one process that imported backthink, forking a process per command.

Run as a file by support/forks.py::

    python tests/support/forkserver.py SOCKET

it imports every backthink module, prints `FORKSERVER_READY` once it accepts
requests on the unix socket SOCKET, and forks for each. A request is one
connection: a JSON header (argv, cwd, env, an open-files limit, or code for `-c`)
with the three standard streams passed as file descriptors. The server answers one
line with the pid, and a second with the exit code (negative for a signal) once the
process ended. Nothing runs in the server before a fork, so each command starts from
the state a fresh interpreter has after its imports.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pkgutil
import resource
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

READY = "FORKSERVER_READY"
MAX_HEADER_BYTES = 1 << 20  # one request's JSON header (an environment is a few KB)


@dataclass
class Job:
    """What a forked child runs: a command line in a folder, environment and streams.

    `code`, when set, runs as `python -c CODE ARGV` would, instead of `python -m backthink ARGV`.
    """

    argv: list[str]
    cwd: str
    env: dict[str, str]
    fds: list[int]
    open_files: int | None
    code: str | None

    def become(self) -> None:
        """Turn this forked child into the command's process (streams, folder, env, limits)."""
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
        for fd in set(self.fds):
            if fd > 2:
                os.close(fd)
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.env)
        time.tzset()  # the zone is read from TZ once; this process may have another
        if self.open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))
        # As `python -m` and `-c` leave them: the working folder first on the path, the argv.
        sys.path[0] = self.cwd if self.code is None else ""
        sys.argv = ["-m" if self.code is None else "-c", *self.argv]


def _receive(conn: socket.socket) -> Job:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    if len(fds) != 3:
        raise ConnectionError("a request without its three streams")
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk or len(data) > MAX_HEADER_BYTES:
            raise ConnectionError("an incomplete request")
        data += chunk
    header = json.loads(data)
    return Job(
        header["argv"], header["cwd"], header["env"], fds, header["open_files"], header["code"]
    )


def _preload() -> None:
    """Import every backthink module, so no command imports one after its fork."""
    import backthink

    for module in pkgutil.walk_packages(backthink.__path__, "backthink."):
        if module.name == "backthink.__main__":  # importing it runs the command line
            continue
        with contextlib.suppress(ImportError):  # an optional library that is not installed
            importlib.import_module(module.name)
    # A fork copies only the thread that forks: a thread started by an import would be
    # missing from every command, holding whatever lock it held.
    if threading.active_count() != 1:
        raise RuntimeError(f"importing backthink started threads: {threading.enumerate()}")
    # What the imports built lives as long as any command; frozen, no command's collector
    # walks (and so copies) it, nor does its exit: that halves a short command's time.
    gc.freeze()


def serve(path: str) -> Job:
    """Fork a process for each request on the unix socket `path`; return only in a child."""
    _preload()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    job = _receive(conn)
                except (OSError, ValueError, KeyError):
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    # The child keeps nothing of the server: its sockets, pipe and handlers.
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    listener.close()
                    for other in waiting.values():
                        other.close()
                    conn.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return job
                for fd in set(job.fds):
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(b"%d\n" % pid)
                waiting[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(waiting)


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Answer each ended child's exit code to whoever asked for it."""
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            conn.close()


def _run_child(job: Job) -> None:
    """Run the job's command in this forked child, as the interpreter's start would."""
    import runpy

    job.become()
    if job.code is not None:
        exec(compile(job.code, "<string>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module("backthink", run_name="__main__", alter_sys=True)


def main(args: Sequence[str]) -> None:
    """Serve on the socket named in `args`; in each forked child, run its command."""
    _run_child(serve(args[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
