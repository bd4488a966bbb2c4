"""Idle daemon: `backthink run` as a process, its memory over many poked rounds, its idle CPU."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    BENCH_VAR,
    NO_PUSH,
    READY_TIMEOUT_S,
    VENV_BIN,
    FakeServerProcess,
    Figure,
    LineReader,
    clean_environ,
    cpu_seconds,
    exit_on_sigterm,
    fresh_dir,
    group_parser,
    print_figures,
    push_reply,
    rss_kb,
    settings_doc,
    stop_process,
    toml_config,
    write_figures,
    write_state_file,
)

GROUP = "idle daemon"
POKES = 1_000  # measured rounds
QUICK_POKES = 200
WARMUP_POKES = 50  # rounds before the memory baseline: lazy imports, statement caches, pools
IDLE_WINDOW_S = 10.0  # seconds of idle time whose CPU is measured
QUICK_IDLE_WINDOW_S = 5.0
SETTLE_S = 1.0  # seconds between the last poke and the idle window
POKE_TIMEOUT_S = 30.0  # seconds for one poked round
TARGET_GROWTH_KB = 5 * 1024  # KiB of RSS growth over the measured rounds
TARGET_IDLE_CPU = 0.5  # percent of one core
RSS_SAMPLE_EVERY = 100  # pokes between RSS samples
TREND_MIN_POKES = 2_000  # pokes from which the RSS trend of the second half is shown
PAGE_POKES = 50  # rounds each daemon runs before the page's cost is measured
PAGE_LOADS = 10  # loads of each page before the page's cost is measured
TARGET_PAGE_KB = 10 * 1024  # KiB the page may add to the idle daemon
PAGE_PATHS = ("/", "/day/{day}", "/rounds/{round_id}", "/memory", "/api/rounds", "/api/status")


def poke(path: Path, trigger: str) -> dict[str, Any]:
    """One round through the daemon's socket: one JSON line out, one JSON line back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(POKE_TIMEOUT_S)
        sock.connect(str(path))
        sock.sendall(json.dumps({"trigger": trigger}, ensure_ascii=False).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


def _is_event(name: str) -> Any:
    def match(line: str) -> bool:
        try:
            return bool(json.loads(line).get("event") == name)
        except ValueError:
            return False

    return match


def slope_kib_per_1000(samples: list[tuple[int, int]]) -> float:
    """Least-squares slope of (rounds, RSS KiB) samples, in KiB per 1,000 rounds."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in samples)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in samples)
    return sxy / sxx * 1000 if sxx else 0.0


def run(*, quick: bool, rebuild: bool, pokes: int | None = None) -> list[Figure]:
    """Start the daemon, poke it, watch its memory and CPU; return the figures."""
    env = clean_environ()
    pokes = pokes or (QUICK_POKES if quick else POKES)
    window_s = QUICK_IDLE_WINDOW_S if quick else IDLE_WINDOW_S
    work = fresh_dir(BENCH_VAR / "idle")
    state, sock = work / "state.json", work / "bt.sock"
    write_state_file(state, at=datetime.now(UTC))
    figures: list[Figure] = []
    with FakeServerProcess(reply=NO_PUSH, log=BENCH_VAR / "logs" / "fake-idle.log") as fake:
        tag = uuid.uuid4().hex[:8]
        # The greeting, the warm-up and the measured pokes each get a distinct push.
        fake.script([push_reply(f"{tag}-{i}") for i in range(1 + WARMUP_POKES + pokes)])
        config = work / "backthink.toml"
        doc = settings_doc(base_url=fake.base_url, db=work / "bt.db", state=state)
        config.write_text(toml_config(doc), "utf-8")
        daemon_env = dict(
            env,
            BACKTHINK_SCHEDULE__HEARTBEAT="6h",
            BACKTHINK_SCHEDULE__JITTER="0s",
            BACKTHINK_SCHEDULE__STARTUP_GREETING="true",
            BACKTHINK_DAEMON__SOCKET=str(sock),
        )
        proc = subprocess.Popen(
            [str(VENV_BIN / "backthink"), "--config", str(config), "run"],
            cwd=work,
            env=daemon_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert proc.stdout is not None
            log = LineReader(proc.stdout, keep=False)
            log.wait_for(_is_event("daemon.ready"), READY_TIMEOUT_S)
            log.wait_for(_is_event("round.finished"), READY_TIMEOUT_S)
            rss_ready = rss_kb(proc.pid)
            outcomes: Counter[str] = Counter()
            for i in range(WARMUP_POKES):
                poke(sock, f"bench warm-up {i}")
            rss_warm = rss_kb(proc.pid)
            samples = [(0, rss_warm)]
            started = time.perf_counter()
            for i in range(pokes):
                answer = poke(sock, f"日程：bench {i}")
                outcomes[
                    f"{answer.get('outcome')}/{answer.get('reason', answer.get('error'))}"
                ] += 1
                if (i + 1) % RSS_SAMPLE_EVERY == 0:
                    samples.append((i + 1, rss_kb(proc.pid)))
            took = time.perf_counter() - started
            rss_after = rss_kb(proc.pid)
            time.sleep(SETTLE_S)
            cpu0 = cpu_seconds(proc.pid)
            time.sleep(window_s)
            idle_pct = (cpu_seconds(proc.pid) - cpu0) / window_s * 100
            rss_idle = rss_kb(proc.pid)
        finally:
            code = stop_process(proc)
    growth = rss_after - rss_warm
    delivered = outcomes.get("delivered/web", 0)
    figures += [
        Figure(GROUP, "RSS after ready + greeting", f"{rss_ready / 1024:.1f} MiB", "", None),
        Figure(
            GROUP, f"RSS after {WARMUP_POKES} warm-up pokes", f"{rss_warm / 1024:.1f} MiB", "", None
        ),
        Figure(GROUP, f"RSS after {pokes:,} more pokes", f"{rss_after / 1024:.1f} MiB", "", None),
        Figure(
            GROUP,
            f"RSS growth over {pokes:,} rounds",
            f"{growth / 1024:+.2f} MiB",
            f"< {TARGET_GROWTH_KB / 1024:g} MiB",
            growth < TARGET_GROWTH_KB,
        ),
        Figure(
            GROUP,
            "RSS growth since ready",
            f"{(rss_after - rss_ready) / 1024:+.2f} MiB ({rss_after / rss_ready - 1:+.1%})",
            "",
            None,
        ),
        Figure(
            GROUP, "poked rounds delivered/web", f"{delivered}/{pokes}", "all", delivered == pokes
        ),
        Figure(GROUP, "poke round trip (mean)", f"{took / pokes * 1000:.1f} ms", "", None),
        Figure(
            GROUP,
            f"idle CPU over {window_s:g} s",
            f"{idle_pct:.2f}% of a core",
            f"< {TARGET_IDLE_CPU:g}%",
            idle_pct < TARGET_IDLE_CPU,
        ),
        Figure(GROUP, "RSS after idle window", f"{rss_idle / 1024:.1f} MiB", "", None),
        Figure(GROUP, "exit code after SIGTERM", str(code), "0", code == 0),
    ]
    if pokes >= TREND_MIN_POKES:
        # Caches (SQLite keeps up to 2 MiB of pages per connection) fill during the
        # first ~1,000 rounds; only a longer run tells a plateau from a leak.
        trend = slope_kib_per_1000(samples[len(samples) // 2 :])
        figures.append(
            Figure(GROUP, "RSS trend, second half", f"{trend:+.0f} KiB / 1,000 rounds", "", None)
        )
    if delivered != pokes:
        print(f"  poke outcomes: {dict(outcomes)}", file=sys.stderr)
    return figures


def _idle_rss(work: Path, fake_url: str, *, web: bool) -> int:
    """Idle RSS (KiB) of a daemon after PAGE_POKES rounds, and with the page on, page loads."""
    state, sock = work / "state.json", work / "bt.sock"
    write_state_file(state, at=datetime.now(UTC))
    config = work / "backthink.toml"
    doc = settings_doc(base_url=fake_url, db=work / "bt.db", state=state)
    config.write_text(toml_config(doc), "utf-8")
    env = dict(
        clean_environ(),
        BACKTHINK_SCHEDULE__HEARTBEAT="6h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
        BACKTHINK_DAEMON__SOCKET=str(sock),
        BACKTHINK_WEB__LISTEN="127.0.0.1:0" if web else "",
    )
    proc = subprocess.Popen(
        [str(VENV_BIN / "backthink"), "--config", str(config), "run"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        log = LineReader(proc.stdout, keep=False)
        url = ""
        if web:
            url = json.loads(log.wait_for(_is_event("web.ready"), READY_TIMEOUT_S))["url"]
        log.wait_for(_is_event("daemon.ready"), READY_TIMEOUT_S)
        answer: dict[str, Any] = {}
        for i in range(PAGE_POKES):
            answer = poke(sock, f"bench page {i}")
        day = datetime.now(UTC).date().isoformat()
        for _ in range(PAGE_LOADS if web else 0):
            for path in PAGE_PATHS:
                page = url.rstrip("/") + path.format(day=day, round_id=answer["round_id"])
                with urllib.request.urlopen(page, timeout=POKE_TIMEOUT_S) as response:
                    response.read()
        time.sleep(SETTLE_S)
        return rss_kb(proc.pid)
    finally:
        stop_process(proc)


def page_cost() -> list[Figure]:
    """What the page adds to the idle daemon: RSS with [web] on, less RSS with it off."""
    with FakeServerProcess(reply=NO_PUSH, log=BENCH_VAR / "logs" / "fake-page.log") as fake:
        off = _idle_rss(fresh_dir(BENCH_VAR / "page-off"), fake.base_url, web=False)
        on = _idle_rss(fresh_dir(BENCH_VAR / "page-on"), fake.base_url, web=True)
    return [
        Figure(
            GROUP,
            f"idle RSS, page off / on ({PAGE_LOADS} loads of each page)",
            f"{off / 1024:.1f} / {on / 1024:.1f} MiB",
            "",
            None,
        ),
        Figure(
            GROUP,
            "the page's cost to the idle daemon",
            f"{(on - off) / 1024:+.1f} MiB",
            f"< {TARGET_PAGE_KB / 1024:g} MiB",
            on - off < TARGET_PAGE_KB,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__,
        quick="fewer pokes, a shorter idle window",
        rebuild="accepted for symmetry; no cache",
    )
    parser.add_argument("--pokes", type=int, help=f"measured pokes (default {POKES:,})")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick, rebuild=args.rebuild, pokes=args.pokes) + page_cost()
    print_figures("2. Idle daemon (memory across poked rounds, idle CPU)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
