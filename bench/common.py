"""Shared parts of the benchmarks: figures, processes, the fake endpoint, cached databases."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import queue
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_VAR = ROOT / "var" / "bench"
TESTS = ROOT / "tests"
PROMPTS = ROOT / "backthink" / "prompts"
VENV_BIN = Path(sys.executable).parent
FAKE_SERVER = TESTS / "support" / "fake_openai.py"

READY_TIMEOUT_S = 30.0  # seconds for a child process to come up on a loaded machine
STOP_TIMEOUT_S = 40.0  # seconds for a child to exit after SIGTERM (the daemon drains up to 30 s)
KILL_WAIT_S = 5.0  # seconds to wait after SIGKILL
HTTP_TIMEOUT_S = 30.0  # seconds for one control request to the fake endpoint
SCRIPT_CHUNK = 2_000  # replies per control request, so no request body grows huge
CLK_TCK = os.sysconf("SC_CLK_TCK")  # clock ticks per second in /proc/<pid>/stat

OWNER = "owner"
OWNER_NAME = "开拓者"
PERSONA_ID = "cyrene"
PERSONA_NAME = "昔涟"
OTHER_PERSONA = "march7"
TIMEZONE = "Asia/Shanghai"
API_KEY = "sk-bench-not-a-secret"
MODEL_NAME = "fake-model"
SQLITE_STAMP = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DATETIME in SQLite
DB_FORMAT = 3  # bump when the generated history changes, so cached databases are rebuilt


# -- figures ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One measured figure beside its target; `ok` is None for a figure without a target."""

    group: str
    name: str
    value: str
    target: str
    ok: bool | None

    @property
    def verdict(self) -> str:
        """PASS, MISS, or "info" when there is no target."""
        if self.ok is None:
            return "info"
        return "PASS" if self.ok else "MISS"


def print_figures(title: str, figures: Sequence[Figure]) -> None:
    """Print a group's figures as an aligned table."""
    print(f"\n== {title} ==")
    rows = [(f.name, f.value, f.target, f.verdict) for f in figures]
    header = ("figure", "value", "target", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    sys.stdout.flush()


def write_figures(path: Path | None, figures: Sequence[Figure]) -> None:
    """Write figures as JSON for bench/run_all.py; nothing when no path was given."""
    if path is not None:
        path.write_text(json.dumps([asdict(f) for f in figures], ensure_ascii=False), "utf-8")


def group_parser(description: str | None, *, quick: str, rebuild: str) -> argparse.ArgumentParser:
    """The options `run_all.py` passes to every group (--quick, --rebuild, --results).

    Args:
        description: the group's docstring.
        quick: what --quick does in this group.
        rebuild: what --rebuild does in this group.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--rebuild", action="store_true", help=rebuild)
    parser.add_argument("--results", type=Path, help="write the figures here as JSON")
    return parser


def read_figures(path: Path) -> list[Figure]:
    """Read figures written by `write_figures`."""
    return [Figure(**item) for item in json.loads(path.read_text("utf-8"))]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so every `finally` stops the processes it started."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def clean_environ() -> dict[str, str]:
    """The environment without backthink or OpenAI overrides, which would bend the settings."""
    for key in [k for k in os.environ if k.startswith(("BACKTHINK_", "OPENAI_"))]:
        del os.environ[key]
    return dict(os.environ)


# -- processes ----------------------------------------------------------------------------


def rss_kb(pid: int | str = "self") -> int:
    """Resident memory of a process in KiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces; the fields after its closing parenthesis do not.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLK_TCK


def stop_process(proc: subprocess.Popen[Any], *, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM, wait, then SIGKILL: the process is gone when this returns."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT_S)
    return proc.returncode


class LineReader:
    """Reads a child's output lines in a thread, so its pipe never fills up."""

    def __init__(self, stream: IO[str], *, keep: bool = True) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.kept: list[str] = []
        self._keep = keep
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                if self._keep:
                    self.kept.append(line)
                self.lines.put(line)

    def wait_for(self, predicate: Any, timeout_s: float) -> str:
        """Return the first line (from now on) for which `predicate(line)` is true."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if predicate(line):
                return line
        raise TimeoutError(f"no matching line within {timeout_s:g}s")

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for the reader to reach the end of the stream."""
        self._thread.join(timeout_s)


class FakeServerProcess:
    """The fake endpoint as its own process (its own GIL), scripted over its control API."""

    def __init__(self, *, reply: str, log: Path) -> None:
        self._reply = reply
        self._log = log
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> FakeServerProcess:
        self._log.parent.mkdir(parents=True, exist_ok=True)
        with self._log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(FAKE_SERVER), "--port", "0", "--reply", self._reply],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=ROOT,
            )
        try:
            assert self.proc.stdout is not None
            reader = LineReader(self.proc.stdout)
            line = reader.wait_for(lambda s: s.startswith("FAKE_OPENAI_READY"), READY_TIMEOUT_S)
            self.base_url = line.split()[1]
        except BaseException:
            stop_process(self.proc)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s=10)

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self.proc is not None
        return self.proc.pid

    def _control(self, path: str, body: Any) -> Any:
        root = self.base_url.removesuffix("/v1")
        request = urllib.request.Request(
            f"{root}/_fake/{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return json.loads(response.read())

    def script(self, items: Sequence[str | dict[str, Any]]) -> int:
        """Queue replies (the JSON forms of fake_openai.item_from_json); return how many wait."""
        pending = 0
        for start in range(0, len(items), SCRIPT_CHUNK):
            pending = int(
                self._control("script", list(items[start : start + SCRIPT_CHUNK]))["pending"]
            )
        return pending

    def pending(self) -> int:
        """How many scripted replies have not been used."""
        return int(self._control("script", [])["pending"])

    def reset(self) -> None:
        """Forget recorded requests and queued replies."""
        self._control("reset", {})


def push_reply(tag: str) -> str:
    """A footer deciding a routine push with a body no other reply repeats.

    The words vary as a companion's do (a chat line of the benchmark's phrase
    pool, picked by the tag): eighty pushes of one sentence would make every
    round recall the seventy-nine before it, which no real history does.
    """
    line = message_text(random.Random(tag), assistant=True)
    return f"[我决定:push]\n[紧急:routine]\n{tag}：{line}"


NO_PUSH = "[我决定:no_push]"


# -- settings -----------------------------------------------------------------------------


def write_state_file(path: Path, *, at: datetime) -> None:
    """A fresh owner-state file: available, a device, one schedule item, one note."""
    doc = {
        "updated_at": at.isoformat(),
        "availability": "available",
        "device": {"battery": "64%", "charging": False, "focus_mode": "off"},
        "schedule": [{"at": (at + timedelta(hours=3)).isoformat(), "title": "组会"}],
        "notes": ["昨晚睡得晚"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")


def settings_doc(
    *, base_url: str, db: Path, state: Path, **sections: dict[str, Any]
) -> dict[str, Any]:
    """Settings for a round that always may push: no quiet hours, no rate limits, web by default."""
    doc: dict[str, Any] = {
        "owner": {"id": OWNER, "name": OWNER_NAME, "timezone": TIMEZONE},
        "persona": {"id": PERSONA_ID, "name": PERSONA_NAME, "prompt_file": ""},
        "model": {
            "base_url": base_url,
            "api_key": API_KEY,
            "name": MODEL_NAME,
            "max_retries": 0,
            "timeout_s": 30,
        },
        "database": {"url": f"sqlite+aiosqlite:///{db}"},
        "prompt": {"dir": str(PROMPTS), "language": "zh"},
        "state": {"file": str(state)},
        "gate": {
            "quiet_hours": "",
            "min_interval": "0s",
            "daily_cap": 1_000_000_000,
            "max_unanswered": 1_000_000_000,
            "default_channel": "web",
        },
        "channels": {"web": {"type": "web"}},
    }
    for name, values in sections.items():
        doc[name] = {**doc.get(name, {}), **values}
    return doc


def toml_config(doc: dict[str, Any]) -> str:
    """Render a settings document (two levels of tables) as TOML."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return str(v)
        return json.dumps(str(v), ensure_ascii=False)

    lines: list[str] = []
    for section, body in doc.items():
        flat = {k: v for k, v in body.items() if not isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {value(v)}" for k, v in flat.items())
        for name, sub in body.items():
            if isinstance(sub, dict):
                lines.append(f"[{section}.{name}]")
                lines.extend(f"{k} = {value(v)}" for k, v in sub.items())
        lines.append("")
    return "\n".join(lines)


def quiet_logs() -> None:
    """Render the daemon's JSON log lines as in production, but into /dev/null."""
    from backthink.host import logs

    sink = open(os.devnull, "w", encoding="utf-8")  # open for the process
    logs.configure(stream=sink, json=True, level="info")


# -- generated histories ------------------------------------------------------------------

_ZH = (
    "今天组会讲得还行",
    "导师说下周再改一版",
    "我刚到家",
    "晚饭吃了牛肉面",
    "好困啊",
    "明天早上八点有课",
    "你还记得上次说的那本书吗",
    "下雨了，没带伞",
    "终于把实验跑完了",
    "周末想去爬山",
    "咖啡喝多了睡不着",
    "代码又报错了",
    "妈妈打电话来问我什么时候回家",
    "刚看完那部电影，结局有点难过",
    "记得提醒我交报告",
)
_EN = (
    "just got back from the gym",
    "the build is red again",
    "can you remind me about the dentist tomorrow",
    "I think I finally understand the bug",
    "reading that paper you mentioned",
    "so tired today",
    "the train was late again",
    "made pasta for dinner",
    "meeting ran over by an hour",
    "let's talk about the trip later",
)
_REPLY_ZH = (
    "辛苦啦，先歇一会儿吧",
    "嗯嗯，我记着呢",
    "听起来不错呀",
    "要不要先喝点热水",
    "别太晚睡哦",
    "我在呢，慢慢说",
    "那就一步一步来",
)
_REPLY_EN = ("that sounds rough, take a break", "I remember", "nice!", "one step at a time")


def message_text(rng: random.Random, *, assistant: bool) -> str:
    """A chat line of about 20-200 characters, Chinese more often than English."""
    zh = rng.random() < 0.7
    pool = (_REPLY_ZH if zh else _REPLY_EN) if assistant else (_ZH if zh else _EN)
    target = int(20 * 10 ** (rng.random()))  # log-uniform between 20 and 200 characters
    sep = "，" if zh else ", "
    parts = [rng.choice(pool)]
    while len(sep.join(parts)) < target:
        parts.append(rng.choice(pool))
    return sep.join(parts) + ("。" if zh else ".")


MessageRowValues = tuple[str, str, str, str, str | None, str | None, str, str]


def generate_history(
    owner: str, count: int, *, end: datetime, rng: random.Random
) -> Iterator[MessageRowValues]:
    """`count` messages of one owner ending at `end`, oldest first.

    Users and the persona take turns (a user sometimes writes twice), about one
    message in 500 is a proactive push, and messages are 5 s to 15 min apart.
    """
    gaps = [rng.uniform(5, 900) for _ in range(count)]
    at = end - timedelta(seconds=sum(gaps))
    role = "user"
    for i in range(count):
        at += timedelta(seconds=gaps[i])
        proactive = role == "assistant" and rng.random() < 0.004
        assistant = role == "assistant"
        yield (
            owner,
            "main",
            role,
            message_text(rng, assistant=assistant),
            PERSONA_ID if assistant else None,
            ("web" if proactive else None) if assistant else rng.choice((None, None, "web")),
            "proactive" if proactive else "chat",
            at.strftime(SQLITE_STAMP),
        )
        role = "user" if assistant else ("user" if rng.random() < 0.15 else "assistant")


@dataclass(frozen=True)
class HistoryDb:
    """A cached database: its file and the largest message id it was built with."""

    path: Path
    max_id: int
    messages: int


def _sidecar(db: Path) -> Path:
    return db.with_suffix(".json")


def _remove_db(db: Path) -> None:
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), _sidecar(db)):
        path.unlink(missing_ok=True)


def _migrate(db: Path) -> None:
    from backthink.store import open_store

    async def go() -> None:
        database, _, _ = await open_store(f"sqlite+aiosqlite:///{db}")
        await database.dispose()

    asyncio.run(go())


def history_db(name: str, owners: Sequence[str], per_owner: int, *, rebuild: bool) -> HistoryDb:
    """A migrated database holding `per_owner` messages for each owner, cached under var/bench.

    A cached database is reset to how it was built (rounds, deliveries, marks and
    every message added since are deleted) and migrated to the newest schema.
    """
    BENCH_VAR.mkdir(parents=True, exist_ok=True)
    db = BENCH_VAR / f"{name}.db"
    key = {"format": DB_FORMAT, "owners": len(owners), "per_owner": per_owner}
    sidecar = _sidecar(db)
    cached = None
    if not rebuild and db.exists() and sidecar.exists():
        meta = json.loads(sidecar.read_text("utf-8"))
        if {k: meta.get(k) for k in key} == key:
            cached = meta
    if cached is None:
        started = time.perf_counter()
        _remove_db(db)
        _migrate(db)
        total = _fill(db, owners, per_owner)
        with sqlite3.connect(db) as conn:
            max_id = int(conn.execute("SELECT max(id) FROM message").fetchone()[0])
        cached = {**key, "max_id": max_id, "messages": total}
        sidecar.write_text(json.dumps(cached), "utf-8")
        took = time.perf_counter() - started
        print(f"  built {db.relative_to(ROOT)}: {total:,} messages in {took:.1f} s", flush=True)
    else:
        _migrate(db)
    reset_db(db, int(cached["max_id"]))
    return HistoryDb(db, int(cached["max_id"]), int(cached["messages"]))


def _fill(db: Path, owners: Sequence[str], per_owner: int) -> int:
    rng = random.Random(20261130)
    end = datetime.now(UTC) - timedelta(days=1)
    insert = (
        "INSERT INTO message (owner_id, session_id, role, text, speaker, channel, origin,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    total = 0
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        batch: list[MessageRowValues] = []
        for owner in owners:
            for row in generate_history(owner, per_owner, end=end, rng=rng):
                batch.append(row)
                if len(batch) >= 50_000:
                    conn.executemany(insert, batch)
                    total += len(batch)
                    batch.clear()
        conn.executemany(insert, batch)
        total += len(batch)
        # The history is indexed as a migration would index it: a daemon meets a
        # caught-up index, not a backlog of the whole history.
        index_all(conn)
        # No ANALYZE: the daemon never runs it, so the planner sees what it sees in production.
        conn.execute("COMMIT")
    finally:
        conn.close()
    return total


def index_all(conn: sqlite3.Connection) -> None:
    """Index every message and memory afresh (FTS5 'rebuild'), as migrations 0007 and 0011 do."""
    from backthink.memory.terms import index_text

    for table in ("memory", "message"):
        conn.execute(f"INSERT INTO {table}_fts({table}_fts) VALUES ('rebuild')")
        conn.execute(f"INSERT INTO {table}_words({table}_words) VALUES ('delete-all')")
        conn.executemany(
            f"INSERT INTO {table}_words(rowid, text) VALUES (?, ?)",
            ((i, index_text(t)) for i, t in conn.execute(f"SELECT id, text FROM {table}")),
        )


def unindex_after(conn: sqlite3.Connection, table: str, max_id: int) -> None:
    """Remove the index entries of `table`'s rows past `max_id`, before they are deleted.

    Nothing removes a deleted row's entries but the daemon's own forget, so a
    benchmark that deletes what it added does this first; otherwise a later
    run's rows, taking the same ids, would stay unindexed.
    """
    from backthink.memory.terms import index_text

    fts = f"{table}_fts"
    conn.execute(
        f"INSERT INTO {fts}({fts}, rowid, text) SELECT 'delete', t.id, t.text FROM {table} t"
        f" JOIN {fts}_docsize d ON d.id = t.id WHERE t.id > ?",
        (max_id,),
    )
    words = f"{table}_words"
    indexed = conn.execute(
        f"SELECT t.id, t.text FROM {table} t JOIN {words}_docsize d ON d.id = t.id WHERE t.id > ?",
        (max_id,),
    ).fetchall()
    conn.executemany(
        f"INSERT INTO {words}({words}, rowid, text) VALUES ('delete', ?, ?)",
        [(i, index_text(t)) for i, t in indexed],
    )


def reset_db(db: Path, max_id: int) -> None:
    """Delete what benchmark runs added: rounds, deliveries, marks, newer messages."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        unindex_after(conn, "message", max_id)
        conn.execute("DELETE FROM message WHERE id > ?", (max_id,))
        for table in ("round", "delivery", "mark"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def fresh_dir(path: Path) -> Path:
    """An empty folder at `path` (whatever was there is removed)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@dataclass(frozen=True)
class ApiDaemon:
    """A running `backthink run` with its API on: the owner's token, the process, its log."""

    token: str
    proc: subprocess.Popen[str]
    log: LineReader
    url: str
    """The API's base URL, as `api.ready` gave it (ends with a slash)."""


@contextlib.contextmanager
def api_daemon(cli: Sequence[str], *, cwd: Path, env: dict[str, str]) -> Iterator[ApiDaemon]:
    """Make the owner `owner` a token, start the daemon, and wait for its API; stop it after.

    `cli` is the command line up to the subcommand (`backthink --config FILE`).
    """
    token = subprocess.run(
        [*cli, "owners", "token", "owner"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=READY_TIMEOUT_S,
    ).stdout.strip()
    proc = subprocess.Popen(
        [*cli, "run"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        log = LineReader(proc.stdout, keep=False)
        ready = log.wait_for(lambda line: '"api.ready"' in line, READY_TIMEOUT_S)
        yield ApiDaemon(token, proc, log, json.loads(ready)["url"])
    finally:
        stop_process(proc)
