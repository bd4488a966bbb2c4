"""Worst case input: a 10 MB message and a 50 MB state file -> request size and peak RSS.

Two `backthink think --dry-run --json` processes on the same settings: one over a
typical history and state file (the baseline), one where the chat app wrote a
10 MB message straight into the database and a runaway script wrote a 50 MB
state file. Each child's peak RSS comes from `wait4` (`ru_maxrss`), its request
from its stdout. Then one real round (`think --json`) against the fake endpoint
shows what the endpoint received and the notes the round recorded.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import (
    BENCH_VAR,
    NO_PUSH,
    OWNER,
    SQLITE_STAMP,
    TESTS,
    Figure,
    clean_environ,
    exit_on_sigterm,
    fresh_dir,
    group_parser,
    message_text,
    print_figures,
    settings_doc,
    toml_config,
    write_figures,
    write_state_file,
)

sys.path.insert(0, str(TESTS))
from support.fake_openai import FakeOpenAI  # tests/ joins the path just above
from support.fake_script import CHARS_PER_TOKEN

GROUP = "worst case"
MESSAGE_BYTES = 10 * 1024 * 1024  # bytes of UTF-8 in the one huge message
STATE_BYTES = 50 * 1024 * 1024  # bytes of the runaway state file
QUICK_MESSAGE_BYTES = 2 * 1024 * 1024
QUICK_STATE_BYTES = 10 * 1024 * 1024
HISTORY = 19  # typical messages beside the huge one
MAX_CHARS = 48_000  # the default prompt.max_chars, the target of the request size
RSS_RATIO_TARGET = 1.5  # peak RSS of the worst case against the baseline's
CHILD_TIMEOUT_S = 120.0  # seconds for one command


def _huge_text(size: int, rng: random.Random) -> str:
    """Chat lines, Chinese and English, joined until the text holds `size` bytes of UTF-8."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = message_text(rng, assistant=False)
        lines.append(line)
        total += len(line.encode("utf-8")) + 1
    return "\n".join(lines)


def _runaway_state(path: Path, size: int, at: datetime) -> None:
    """A well-formed, fresh state document that a script let grow to `size` bytes."""
    note = "n" * 1000
    count = size // (len(note) + 3)
    doc = {"updated_at": at.isoformat(), "availability": "dnd", "notes": [note] * count}
    path.write_text(json.dumps(doc), "utf-8")


def _run(work: Path, config: Path, env: dict[str, str], *args: str) -> tuple[str, int, float]:
    """Run `backthink ARGS`; return its stdout, peak RSS in KiB and wall time in seconds."""
    out = work / "stdout.txt"
    err = work / "stderr.txt"
    started = time.perf_counter()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "backthink", "--config", str(config), *args],
            cwd=work,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
        # wait4 reports this one child's peak RSS; Popen.wait would throw it away.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"backthink {' '.join(args)}: exit {proc.returncode}: {err.read_text()}")
    return out.read_text("utf-8"), int(usage.ru_maxrss), took


def _setup(work: Path, base_url: str, *, worst: bool, quick: bool) -> Path:
    """A folder with config, database (20 messages) and state file; returns the config."""
    fresh_dir(work)
    now = datetime.now(UTC)
    rng = random.Random(20261130)
    db, state = work / "bt.db", work / "state.json"
    config = work / "backthink.toml"
    config.write_text(
        toml_config(settings_doc(base_url=base_url, db=db, state=state)), encoding="utf-8"
    )
    rows = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "text": message_text(rng, assistant=i % 2 == 1),
            "at": (now - timedelta(hours=3) + timedelta(minutes=5 * i)).isoformat(),
        }
        for i in range(HISTORY)
    ]
    chat = work / "chat.jsonl"
    chat.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "backthink",
            "--config",
            str(config),
            "messages",
            "import",
            str(chat),
        ],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=CHILD_TIMEOUT_S,
    )
    at = now - timedelta(minutes=30)
    if worst:
        # Built in a process of its own: a child's peak RSS starts from its parent's at
        # fork, and the allocator would keep this one's heap grown after the inputs.
        sizes = (QUICK_MESSAGE_BYTES, QUICK_STATE_BYTES) if quick else (MESSAGE_BYTES, STATE_BYTES)
        maker = multiprocessing.get_context("spawn").Process(
            target=_write_worst, args=(db, state, at, *sizes)
        )
        maker.start()
        maker.join(CHILD_TIMEOUT_S)
        if maker.exitcode != 0:
            raise RuntimeError(f"building the worst-case inputs failed: exit {maker.exitcode}")
    else:
        write_state_file(state, at=at)
    return config


def _write_worst(db: Path, state: Path, at: datetime, message_bytes: int, state_bytes: int) -> None:
    """Write the huge message into the database and the runaway state file."""
    text = _huge_text(message_bytes, random.Random(20261201))
    # The chat app writes into the message table itself, past any import check.
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO message (owner_id, session_id, role, text, origin, created_at)"
            " VALUES (?, 'main', 'user', ?, 'chat', ?)",
            (OWNER, text, at.strftime(SQLITE_STAMP)),
        )
    _runaway_state(state, state_bytes, at)


def _chars(body: dict[str, Any]) -> int:
    total = 0
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            total += len(content)
        else:
            total += sum(len(part.get("text", "")) for part in content)
    return total


def run(*, quick: bool) -> list[Figure]:
    """Measure the baseline and the worst case; return the figures."""
    env = clean_environ()
    with FakeOpenAI(default_reply=NO_PUSH) as fake:
        measured: dict[str, tuple[dict[str, Any], int, float, Path, Path]] = {}
        for name, worst in (("baseline", False), ("worst", True)):
            work = BENCH_VAR / "worst_case" / name
            config = _setup(work, fake.base_url, worst=worst, quick=quick)
            out, rss, took = _run(work, config, env, "think", "--dry-run", "--json")
            measured[name] = (json.loads(out), rss, took, work, config)
        _, _, _, work, config = measured["worst"]
        _run(work, config, env, "think", "--json")
        (record,) = json.loads(_run(work, config, env, "rounds", "--json")[0])
        received = fake.chat_requests[-1].body
    base_body, base_rss, base_s, _, _ = measured["baseline"]
    body, rss, took, work, _ = measured["worst"]
    chars = _chars(body)
    message_mb = (QUICK_MESSAGE_BYTES if quick else MESSAGE_BYTES) / 1024 / 1024
    state_mb = (QUICK_STATE_BYTES if quick else STATE_BYTES) / 1024 / 1024
    ratio = rss / base_rss
    same = received["messages"] == body["messages"]
    notes = "; ".join(n for n in record["notes"] if n.startswith(("state_", "history_")))
    return [
        Figure(GROUP, "input", f"{message_mb:g} MB message, {state_mb:g} MB state file", "", None),
        Figure(GROUP, "request characters, baseline", f"{_chars(base_body):,}", "", None),
        Figure(
            GROUP,
            "request characters, worst case",
            f"{chars:,} ({chars / MAX_CHARS:.2f} of max_chars)",
            f"<= {MAX_CHARS:,}",
            chars <= MAX_CHARS,
        ),
        Figure(
            GROUP,
            "request tokens, worst case",
            f"~{chars // CHARS_PER_TOKEN:,} (ESTIMATE: chars/4)",
            "",
            None,
        ),
        Figure(GROUP, "round notes", notes or "(none)", "", None),
        Figure(GROUP, "endpoint got the dry run's messages", "yes" if same else "NO", "yes", same),
        Figure(GROUP, "peak RSS, baseline dry run", f"{base_rss / 1024:.1f} MiB", "", None),
        Figure(
            GROUP,
            "peak RSS, worst-case dry run",
            f"{rss / 1024:.1f} MiB ({ratio:.2f}x baseline)",
            f"<= {RSS_RATIO_TARGET:g}x",
            ratio <= RSS_RATIO_TARGET,
        ),
        Figure(
            GROUP, "dry run wall time, baseline / worst", f"{base_s:.2f} / {took:.2f} s", "", None
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__,
        quick="a 2 MB message and a 10 MB state file",
        rebuild="accepted for symmetry; nothing is cached",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures("6. Worst-case input", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
