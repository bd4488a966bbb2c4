"""Run every benchmark group, each in its own process, and print one summary table."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Figure, exit_on_sigterm, read_figures

BENCH = Path(__file__).resolve().parent
# Each group runs alone with a time budget (seconds) after which it is stopped.
GROUPS = (
    ("round_overhead", 300),
    ("idle_daemon", 240),
    ("boot", 180),
    ("prompt_size", 60),
    ("week", 240),
    ("many_owners", 600),
    ("worst_case", 180),
    ("recall", 900),
    ("pg_recall", 300),
    ("workers", 900),
    ("relay", 180),
    ("doors", 240),
)
TERM_GRACE_S = 45.0  # seconds a stopped group gets to stop its own children


def _run_group(name: str, budget_s: float, flags: list[str], out: Path) -> str | None:
    """Run bench/<name>.py; return None on success, else why it failed."""
    # Its own session, so a group that ignores SIGTERM can still be stopped with its children.
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / f"{name}.py"), *flags, "--results", str(out)],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        return f"stopped after its {budget_s:g} s budget"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
    return None if code == 0 else f"exit code {code}"


def main(argv: list[str] | None = None) -> int:
    """Run the groups and print the summary; exit 1 when a group crashed (--strict: or missed)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter windows")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached databases")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any target is missed")
    parser.add_argument("--only", action="append", help="run only this group (repeatable)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    flags = (["--quick"] if args.quick else []) + (["--rebuild"] if args.rebuild else [])
    figures: list[Figure] = []
    crashed: list[str] = []
    timings: list[tuple[str, float]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, budget_s in GROUPS:
            if args.only and name not in args.only:
                continue
            out = Path(tmp) / f"{name}.json"
            began = time.perf_counter()
            problem = _run_group(name, budget_s, flags, out)
            timings.append((name, time.perf_counter() - began))
            if problem is None and out.exists():
                figures += read_figures(out)
            else:
                crashed.append(f"{name}: {problem or 'no figures written'}")
    _summary(figures, crashed, timings, time.perf_counter() - started)
    missed = [f for f in figures if f.ok is False]
    if crashed or (args.strict and missed):
        return 1
    return 0


def _summary(
    figures: list[Figure], crashed: list[str], timings: list[tuple[str, float]], total_s: float
) -> None:
    targeted = [f for f in figures if f.ok is not None]
    print("\n== Summary: figures with a target ==")
    header = ("group", "figure", "value", "target", "")
    rows = [(f.group, f.name, f.value, f.target, f.verdict) for f in targeted]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    passed = sum(1 for f in targeted if f.ok)
    print(f"\n  {passed} PASS, {len(targeted) - passed} MISS", end="")
    print(f", {len(crashed)} group(s) crashed" if crashed else "")
    for line in crashed:
        print(f"  CRASHED {line}")
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings)
    print(f"  time: {spent}; total {total_s:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
