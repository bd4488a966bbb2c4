"""Round overhead: a whole round on SQLite and the real model client, minus the model's latency."""

from __future__ import annotations

import asyncio
import cProfile
import inspect
import pstats
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    BENCH_VAR,
    NO_PUSH,
    OWNER,
    FakeServerProcess,
    Figure,
    clean_environ,
    exit_on_sigterm,
    group_parser,
    history_db,
    percentile,
    print_figures,
    push_reply,
    quiet_logs,
    settings_doc,
    write_figures,
    write_state_file,
)

GROUP = "round overhead"
SIZES = (1_000, 100_000, 1_000_000)  # messages in the owner's history
QUICK_SIZES = (1_000, 100_000)
ROUNDS = 200  # measured rounds per history size
QUICK_ROUNDS = 60
WARMUP = 20  # rounds run first and not measured: imports, statement caches, connections
TARGET_MEDIAN_MS = 5.0  # milliseconds, at the largest history
TARGET_RATIO = 1.5  # largest median over smallest median
PROFILE_TOP = 30  # functions listed by --profile


async def _measure(
    base_url: str,
    db: Path,
    state: Path,
    rounds: int,
    *,
    breakdown: bool = False,
    profile: bool = False,
) -> tuple[list[float], Counter[str]]:
    """Run WARMUP + `rounds` rounds; return each measured round's overhead in ms and outcomes.

    With `breakdown`, every store and model call is timed and the means printed;
    with `profile`, the measured rounds run under cProfile and its top list is printed.
    """
    from backthink.config import Settings
    from backthink.host.app import settle_heap
    from backthink.host.fleet import open_app

    settings = Settings.model_validate(settings_doc(base_url=base_url, db=db, state=state))
    overheads: list[float] = []
    outcomes: Counter[str] = Counter()
    calls: dict[str, list[float]] = {}
    profiler = cProfile.Profile() if profile else None
    async with open_app(settings) as app:
        settle_heap()  # as `backthink run` does
        if breakdown:
            for owner in (app.messages, app.rounds, app.outbox, app.model, app.memories):
                _time_calls(owner, calls)
        for i in range(WARMUP + rounds):
            if i == WARMUP:
                calls.clear()
                if profiler is not None:
                    profiler.enable()
            started = time.perf_counter()
            record = await app.thinker.run_round(OWNER, "heartbeat")
            wall_ms = (time.perf_counter() - started) * 1000
            outcomes[f"{record.outcome.value}/{record.reason}"] += 1
            if i >= WARMUP and record.latency_ms is not None:
                overheads.append(wall_ms - record.latency_ms)
        if profiler is not None:
            profiler.disable()
    if breakdown:
        print(f"\n  time per call over {rounds} rounds (mean ms, calls per round):")
        for name, values in sorted(calls.items(), key=lambda kv: -sum(kv[1])):
            print(f"    {sum(values) / len(values):7.2f} ms  x{len(values) / rounds:.0f}  {name}")
    if profiler is not None:
        print("\n  cProfile of the measured rounds, top functions by cumulative time:")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(PROFILE_TOP)
    return overheads, outcomes


def _time_calls(target: object, calls: dict[str, list[float]]) -> None:
    """Wrap the public coroutine methods of one object so each call's wall time is kept."""
    for name in dir(target):
        method = getattr(target, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue
        key = f"{type(target).__name__}.{name}"

        def timed(method: Any = method, key: str = key) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await method(*args, **kwargs)
                finally:
                    calls.setdefault(key, []).append((time.perf_counter() - started) * 1000)

            return call

        setattr(target, name, timed())


def run(
    *, quick: bool, rebuild: bool, breakdown: bool = False, profile: bool = False
) -> list[Figure]:
    """Measure every history size and return the figures."""
    clean_environ()
    quiet_logs()
    sizes = QUICK_SIZES if quick else SIZES
    rounds = QUICK_ROUNDS if quick else ROUNDS
    state = BENCH_VAR / "round-overhead" / "state.json"
    write_state_file(state, at=datetime.now(UTC))
    dbs = {size: history_db(f"history-{size}", [OWNER], size, rebuild=rebuild) for size in sizes}
    medians: dict[int, float] = {}
    figures: list[Figure] = []
    with FakeServerProcess(reply=NO_PUSH, log=BENCH_VAR / "logs" / "fake-round.log") as fake:
        for size in sizes:
            run_tag = uuid.uuid4().hex[:8]
            fake.script([push_reply(f"{run_tag}-{size}-{i}") for i in range(WARMUP + rounds)])
            overheads, outcomes = asyncio.run(
                _measure(
                    fake.base_url,
                    dbs[size].path,
                    state,
                    rounds,
                    breakdown=breakdown and size == sizes[-1],
                    profile=profile and size == sizes[-1],
                )
            )
            delivered = outcomes.get("delivered/web", 0)
            median, p99 = percentile(overheads, 50), percentile(overheads, 99)
            medians[size] = median
            is_largest = size == sizes[-1]
            figures.append(
                Figure(
                    GROUP,
                    f"median @ {size:,} msgs",
                    f"{median:.2f} ms",
                    f"< {TARGET_MEDIAN_MS:g} ms" if is_largest else "",
                    median < TARGET_MEDIAN_MS if is_largest else None,
                )
            )
            figures.append(Figure(GROUP, f"p99 @ {size:,} msgs", f"{p99:.2f} ms", "", None))
            figures.append(
                Figure(
                    GROUP,
                    f"delivered/web @ {size:,} msgs",
                    f"{delivered}/{WARMUP + rounds}",
                    "all",
                    delivered == WARMUP + rounds,
                )
            )
            if delivered != WARMUP + rounds:
                print(f"  outcomes @ {size:,}: {dict(outcomes)}", file=sys.stderr)
    ratio = medians[sizes[-1]] / medians[sizes[0]]
    figures.append(
        Figure(
            GROUP,
            f"median ratio {sizes[-1]:,} / {sizes[0]:,}",
            f"{ratio:.2f}",
            f"< {TARGET_RATIO:g}",
            ratio < TARGET_RATIO,
        )
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__, quick="smaller histories, fewer rounds", rebuild="rebuild the cached databases"
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="time each store and model call (largest size)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(
        quick=args.quick, rebuild=args.rebuild, breakdown=args.breakdown, profile=args.profile
    )
    print_figures("1. Round overhead (round wall time minus model latency)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
