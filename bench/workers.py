"""The distributed worker on PostgreSQL: throughput and schedule lag, 1 vs 2 workers; CPU per round.

A throwaway PostgreSQL server (`tests/support/pgserver.py`, as the tests start it),
owners written straight into the owner table with COPY, three messages each,
their first heartbeats spread over one interval (as in a fleet that has run
a while), and `backthink worker` processes against the fake endpoint, which
takes 1 s a reply (a separate process). Rounds are read back from the round
table: completed rounds/s in the measured window, and the schedule lag of each
(its start minus its slot, from the slot note every queued round carries).

Loads:
- 10k owners at a 120 s heartbeat (~83 rounds/s offered), 1 worker, then 2;
- 100k owners at the production heartbeat of 30 min (~56 rounds/s offered),
  1 worker: CPU per round of the worker and of PostgreSQL, and whether one
  machine keeps up. The goal: 100k owners on one machine at 30 min.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (
    BENCH_VAR,
    NO_PUSH,
    TESTS,
    FakeServerProcess,
    Figure,
    clean_environ,
    cpu_seconds,
    exit_on_sigterm,
    group_parser,
    percentile,
    print_figures,
    settings_doc,
    stop_process,
    toml_config,
    write_figures,
)

sys.path.insert(0, str(TESTS))
from support.pgserver import (  # tests/ joins the path above
    PgServer,
    PgUnavailableError,
    start_server,
)

GROUP = "workers"
MODEL_LATENCY_S = 1.0
MESSAGES_PER_OWNER = 3
RAMP_S = 15.0  # seconds from the workers' start to the measured window
REPLY_MARGIN = 1.4


@dataclass(frozen=True)
class Load:
    owners: int
    heartbeat_s: int
    workers: int
    window_s: float
    concurrency: int


LOADS = (
    Load(10_000, 120, 1, 60.0, 120),
    Load(10_000, 120, 2, 60.0, 120),
    Load(100_000, 1800, 1, 60.0, 120),
)
QUICK_LOADS = (Load(2_000, 60, 1, 20.0, 60), Load(2_000, 60, 2, 20.0, 60))


def _owner_rows(n: int, heartbeat_s: int, start: datetime) -> io.StringIO:
    """COPY text of n owners, first heartbeats spread evenly over one interval from `start`."""
    out = io.StringIO()
    now = start.isoformat()
    for i in range(n):
        due = (start + timedelta(seconds=heartbeat_s * i / n)).isoformat()
        out.write(f"w{i:06d}\t\tUTC\t\\N\t\\N\t\\N\t{{}}\t{{}}\tt\tcli\t{now}\t{due}\t\\N\n")
    out.seek(0)
    return out


def _message_rows(n: int, at: datetime) -> io.StringIO:
    out = io.StringIO()
    lines = ["今天加班到很晚，好累。", "周末想去爬山。", "Reading a book about birds tonight."]
    for i in range(n):
        for k in range(MESSAGES_PER_OWNER):
            when = (at - timedelta(hours=3 - k)).isoformat()
            out.write(f"w{i:06d}\tmain\tuser\t{lines[k]}\tchat\t{when}\n")
    out.seek(0)
    return out


def _build(url: str, load: Load, start: datetime) -> None:
    """Migrate an empty database and COPY the owners and their messages in."""
    import asyncio

    import psycopg

    from backthink.config import DatabaseSettings
    from backthink.host.queue import conninfo
    from backthink.store import open_database

    async def migrate() -> None:
        async with open_database(DatabaseSettings(url=url)):
            pass

    asyncio.run(migrate())
    with psycopg.connect(conninfo(url)) as conn, conn.cursor() as cur:
        columns = (
            "id, name, timezone, language, persona, state_file, channels, gate, enabled, "
            "source, updated_at, next_due_at, greeted_at"
        )
        with cur.copy(f"COPY owner ({columns}) FROM STDIN") as copy:
            copy.write(_owner_rows(load.owners, load.heartbeat_s, start).read())
        with cur.copy(
            "COPY message (owner_id, session_id, role, text, origin, created_at) FROM STDIN"
        ) as copy:
            copy.write(_message_rows(load.owners, start).read())
        cur.execute("ANALYZE")


def _postgres_cpu(server: PgServer) -> float:
    """CPU seconds of the server and every backend it forked."""
    pid = int((server.data / "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                total += cpu_seconds(int(entry))
    return total


def _rounds(url: str) -> list[tuple[datetime, datetime, datetime | None, str]]:
    import psycopg

    from backthink.host.queue import conninfo
    from backthink.round.recorder import SLOT_NOTE

    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute("SELECT started_at, finished_at, notes, outcome FROM round").fetchall()
    found = []
    for started, finished, notes, outcome in rows:
        slot = None
        for note in json.loads(notes):
            if note.startswith(SLOT_NOTE):
                slot = datetime.fromisoformat(note[len(SLOT_NOTE) :].split(",")[0])
        found.append((started, finished, slot, outcome))
    return found


def measure(server: PgServer, fake: FakeServerProcess, load: Load) -> list[Figure]:
    """Run one load and return its figures."""
    url = server.url(server.create_database())
    start = datetime.now(UTC) + timedelta(seconds=5)
    built = time.perf_counter()
    _build(url, load, start)
    build_s = time.perf_counter() - built
    fake.reset()
    offered = load.owners / load.heartbeat_s
    total_s = RAMP_S + load.window_s + 10
    replies = [{"text": NO_PUSH, "delay_s": MODEL_LATENCY_S}] * math.ceil(
        offered * total_s * REPLY_MARGIN
    )
    fake.script(replies)
    folder = BENCH_VAR / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    doc = settings_doc(
        base_url=fake.base_url,
        db=folder / "unused.db",
        state=folder / "state.json",
        schedule={"heartbeat": f"{load.heartbeat_s}s", "jitter": "0s", "startup_greeting": False},
        worker={"concurrency": load.concurrency},
        daemon={"socket": str(folder / "unused.sock")},
    )
    doc["database"] = {"url": url}
    config = folder / "backthink.toml"
    config.write_text(toml_config(doc), encoding="utf-8")
    env = clean_environ()
    logs = [(folder / f"worker-{i}.log").open("w") for i in range(load.workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "backthink", "--config", str(config), "worker"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    try:
        time.sleep(RAMP_S)
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        pg0 = _postgres_cpu(server)
        window_start = datetime.now(UTC)
        t0 = time.perf_counter()
        time.sleep(load.window_s)
        wall = time.perf_counter() - t0
        window_end = datetime.now(UTC)
        cpu = sum(cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=True))
        pg_cpu = _postgres_cpu(server) - pg0
    finally:
        for p in procs:
            stop_process(p, timeout_s=30)
        for log in logs:
            log.close()
    rounds = _rounds(url)
    done = [r for r in rounds if window_start <= r[1] <= window_end]
    lags = [(r[0] - r[2]).total_seconds() for r in done if r[2] is not None]
    failed = sum(1 for r in rounds if r[3] == "failed")
    rate = len(done) / wall
    per_round = (cpu / len(done) * 1000) if done else math.inf
    per_round_pg = (pg_cpu / len(done) * 1000) if done else math.inf
    label = f"{load.owners:,} owners @ {load.heartbeat_s} s, {load.workers} worker" + (
        "s" if load.workers > 1 else ""
    )
    share = rate / offered * 100
    figures = [
        Figure(
            GROUP,
            f"{label}: offered / completed",
            f"{offered:.1f} / {rate:.1f} rounds/s ({share:.0f}%)",
            "",
            None,
        ),
        Figure(
            GROUP,
            f"{label}: schedule lag p50 / p99",
            f"{percentile(lags, 50):.2f} / {percentile(lags, 99):.2f} s" if lags else "-",
            "",
            None,
        ),
        Figure(
            GROUP,
            f"{label}: CPU per round, worker / PostgreSQL",
            f"{per_round:.1f} / {per_round_pg:.1f} ms",
            "",
            None,
        ),
        Figure(GROUP, f"{label}: failed rounds", f"{failed} of {len(rounds):,}", "0", failed == 0),
        Figure(GROUP, f"{label}: setup (COPY owners and messages)", f"{build_s:.1f} s", "", None),
    ]
    if load.owners >= 100_000:
        # One machine (2 cores here) keeps up when a round's CPU, worker and database
        # together, fits in the time the heartbeat leaves per round on those cores.
        cores = os.cpu_count() or 1
        budget_ms = cores * 1000 / offered
        need = per_round + per_round_pg
        figures.append(
            Figure(
                GROUP,
                f"{label}: CPU per round against the {cores}-core budget at 30 min",
                f"{need:.1f} of {budget_ms:.1f} ms",
                f"< {budget_ms:.1f} ms",
                need < budget_ms,
            )
        )
    return figures


def run(*, quick: bool) -> list[Figure]:
    """Measure every load on one throwaway server."""
    try:
        server = start_server()
    except PgUnavailableError as exc:
        print(f"  workers: skipped: {exc}")
        return []
    figures: list[Figure] = []
    try:
        log = BENCH_VAR / "logs" / "fake-workers.log"
        with FakeServerProcess(reply=NO_PUSH, log=log) as fake:
            for load in QUICK_LOADS if quick else LOADS:
                figures += measure(server, fake, load)
    finally:
        server.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(__doc__, quick="2k owners, a shorter window", rebuild="unused")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures(GROUP, figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
