"""Boot: from starting `backthink run` to the startup greeting's request reaching the endpoint."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

from common import (
    BENCH_VAR,
    NO_PUSH,
    READY_TIMEOUT_S,
    TESTS,
    VENV_BIN,
    Figure,
    clean_environ,
    exit_on_sigterm,
    fresh_dir,
    group_parser,
    print_figures,
    settings_doc,
    stop_process,
    toml_config,
    write_figures,
)

sys.path.insert(0, str(TESTS))
from support.fake_openai import FakeOpenAI  # tests/ joins the path just above

GROUP = "boot"
REPEATS = 5
QUICK_REPEATS = 3
TARGET_S = 1.5  # seconds from Popen to the first chat request
POLL_S = 0.002  # seconds between checks for the first request
IMPORT_TOP = 12  # how many of the slowest imports to list on a miss
CHAT_PATH = "/v1/chat/completions"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class Arrivals:
    """ASGI middleware noting when each chat request arrives, before the app reads it."""

    def __init__(self, app: Asgi, times: list[float]) -> None:
        self.app = app
        self.times = times
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == CHAT_PATH:
            with self.lock:
                self.times.append(time.perf_counter())
        await self.app(scope, receive, send)


def _phases(log: Path, popen_wall: float) -> dict[str, float]:
    """Seconds from Popen to the daemon's own log events, read from its JSON lines."""
    out: dict[str, float] = {}
    for line in log.read_text("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
            event, stamp = entry["event"], entry["timestamp"]
        except (ValueError, KeyError, TypeError):
            continue
        if event in ("daemon.started", "daemon.ready") and event not in out:
            out[event] = datetime.fromisoformat(stamp).timestamp() - popen_wall
    return out


def _boot_once(
    fake: FakeOpenAI, arrivals: list[float], work: Path, env: dict[str, str]
) -> tuple[float, dict[str, float]]:
    """Start the daemon in `work`, return seconds to its first chat request, then stop it."""
    seen = len(arrivals)
    log_path = work / "daemon.log"
    with log_path.open("w") as log:
        popen_wall = time.time()
        started = time.perf_counter()
        proc = subprocess.Popen(
            [str(VENV_BIN / "backthink"), "--config", str(work / "backthink.toml"), "run"],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = started + READY_TIMEOUT_S
            while len(arrivals) == seen:
                if time.perf_counter() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"no chat request from the daemon; see {log_path}")
                time.sleep(POLL_S)
            took = arrivals[seen] - started
        finally:
            stop_process(proc)
    return took, _phases(log_path, popen_wall)


def import_offenders(module: str) -> list[tuple[float, str, str]]:
    """The costliest packages `module` pulls in: (cumulative ms, package, imported by).

    Read from `python -X importtime`, which lists a module after everything it
    imports, one indent level deeper per nesting level.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows: list[tuple[float, str, int]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((int(cumulative) / 1000, name.strip(), depth))
    own = module.split(".")[0]

    def parent(i: int) -> int | None:
        return next((j for j in range(i + 1, len(rows)) if rows[j][2] < rows[i][2]), None)

    found: list[tuple[float, str, str]] = []
    for i, (ms, name, _) in enumerate(rows):
        if "." in name or name == own or name.startswith("_"):
            continue
        # The importer is the nearest ancestor outside the package itself.
        j = parent(i)
        while j is not None and rows[j][1].split(".")[0] == name:
            j = parent(j)
        found.append((ms, name, "-c" if j is None else rows[j][1]))
    return sorted(found, reverse=True)[:IMPORT_TOP]


def run(*, quick: bool, rebuild: bool) -> list[Figure]:
    """Boot the daemon several times on fresh and on existing databases; return the figures."""
    env = clean_environ()
    repeats = QUICK_REPEATS if quick else REPEATS
    root = fresh_dir(BENCH_VAR / "boot")
    arrivals: list[float] = []
    fake = FakeOpenAI(default_reply=NO_PUSH)
    fake.app.add_middleware(Arrivals, times=arrivals)
    fresh: list[float] = []
    warm: list[float] = []
    phases: list[dict[str, float]] = []
    with fake:
        daemon_env = dict(
            env, BACKTHINK_SCHEDULE__HEARTBEAT="6h", BACKTHINK_SCHEDULE__STARTUP_GREETING="true"
        )
        # Bytecode must be cached as in production, or every boot would compile it anew.
        daemon_env.pop("PYTHONDONTWRITEBYTECODE", None)

        def prepare(i: int) -> Path:
            work = fresh_dir(root / f"run-{i}")
            doc = settings_doc(base_url=fake.base_url, db=work / "bt.db", state=work / "state.json")
            (work / "backthink.toml").write_text(toml_config(doc), "utf-8")
            daemon_env["BACKTHINK_DAEMON__SOCKET"] = str(work / "bt.sock")
            return work

        # One untimed boot compiles bytecode and warms the page cache.
        _boot_once(fake, arrivals, prepare(0), daemon_env)
        for i in range(1, repeats + 1):
            took, phase = _boot_once(fake, arrivals, prepare(i), daemon_env)
            fresh.append(took)
            phases.append(phase)
        # The same folders again: the database exists, only the greeting mark is cleared.
        for i in range(1, repeats + 1):
            work = root / f"run-{i}"
            daemon_env["BACKTHINK_DAEMON__SOCKET"] = str(work / "bt.sock")
            with sqlite3.connect(work / "bt.db") as conn:
                conn.execute("DELETE FROM mark")
            took, _ = _boot_once(fake, arrivals, work, daemon_env)
            warm.append(took)
    med = median(fresh)
    figures = [
        Figure(
            GROUP,
            f"fresh state dir, median of {repeats}",
            f"{med:.2f} s",
            f"< {TARGET_S:g} s",
            med < TARGET_S,
        ),
        Figure(
            GROUP, "fresh state dir, min / max", f"{min(fresh):.2f} / {max(fresh):.2f} s", "", None
        ),
        Figure(
            GROUP,
            "existing database, median",
            f"{median(warm):.2f} s (min {min(warm):.2f}, max {max(warm):.2f})",
            "",
            None,
        ),
    ]
    for event in ("daemon.started", "daemon.ready"):
        values = [p[event] for p in phases if event in p]
        if values:
            figures.append(
                Figure(
                    GROUP, f"Popen -> {event} log line, median", f"{median(values):.2f} s", "", None
                )
            )
    if med >= TARGET_S:
        for module in ("backthink.cli.root", "backthink.host.daemon"):
            print(f"\n  python -X importtime -c 'import {module}': costliest packages")
            for ms, name, parent in import_offenders(module):
                print(f"    {ms:8.1f} ms  {name:<24} imported by {parent}")
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(__doc__, quick="fewer boots", rebuild="accepted for symmetry; no cache")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick, rebuild=args.rebuild)
    print_figures("3. Boot to first model request", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
