"""Round holds: what holding its owner costs a round, in this process and on PostgreSQL.

One round at a time per owner: a round enters `LiveTurns.round` before its
first step and leaves it after its last. Figures, per round (entering and
leaving once):

- in process (SQLite, or any process without PostgreSQL): the registry alone;
- PostgreSQL: the registry and the owner's advisory lock (`RoundLocks`), one
  `pg_try_advisory_lock` and one `pg_advisory_unlock` on the process's lock
  connection, on a throwaway server as `pg_recall.py` starts it (fsync off,
  loopback TCP): one round at a time, then bursts of 64 rounds of 64 owners
  starting at the same instant (the daemon's default `max_concurrent_rounds`),
  whose statements queue on that one connection.

No target: `round_overhead.py` says whether a round's whole cost moved.
"""

from __future__ import annotations

import asyncio
import sys
import time

from common import (
    TESTS,
    Figure,
    exit_on_sigterm,
    group_parser,
    percentile,
    print_figures,
    write_figures,
)

sys.path.insert(0, str(TESTS))
from support.pgserver import PgUnavailableError, start_server  # tests/ joins the path above

GROUP = "round holds"
ROUNDS = 5_000  # holds measured one after another
QUICK_ROUNDS = 1_000
CONCURRENT = 64  # rounds holding at once
WAVES = 20  # bursts of CONCURRENT rounds measured


async def _one_by_one(locks: object | None, rounds: int) -> list[float]:
    """Milliseconds of each enter-and-leave of a hold, one round after another."""
    from backthink.host.turns import LiveTurns
    from backthink.store.turn_locks import RoundLocks

    turns = LiveTurns(locks if isinstance(locks, RoundLocks) else None)
    took = []
    for i in range(rounds):
        started = time.perf_counter()
        async with turns.round(f"owner-{i % 100}") as hold:
            assert hold is not None
        took.append((time.perf_counter() - started) * 1000)
    return took


async def _side_by_side(locks: object) -> list[float]:
    """Milliseconds of each enter-and-leave when CONCURRENT rounds start at the same instant."""
    from backthink.host.turns import LiveTurns
    from backthink.store.turn_locks import RoundLocks

    assert isinstance(locks, RoundLocks)
    turns = LiveTurns(locks)
    took: list[float] = []

    async def one_round(owner_id: str) -> None:
        started = time.perf_counter()
        async with turns.round(owner_id) as hold:
            assert hold is not None
        took.append((time.perf_counter() - started) * 1000)

    for _ in range(WAVES):
        await asyncio.gather(*(one_round(f"burst-{i}") for i in range(CONCURRENT)))
    return took


async def _on_postgres(url: str, rounds: int) -> tuple[list[float], list[float]]:
    from backthink.store import create_engine
    from backthink.store.turn_locks import RoundLocks

    engine = create_engine(url)
    locks = RoundLocks(engine)
    try:
        await _one_by_one(locks, 50)  # the connection opened, statements prepared
        alone = await _one_by_one(locks, rounds)
        together = await _side_by_side(locks)
    finally:
        await locks.close()
        await engine.dispose()
    return alone, together


def _figures(label: str, took: list[float], unit: str = "ms") -> list[Figure]:
    scale = 1000 if unit == "µs" else 1
    return [
        Figure(GROUP, f"{label} median", f"{percentile(took, 50) * scale:.3f} {unit}", "", None),
        Figure(GROUP, f"{label} p99", f"{percentile(took, 99) * scale:.3f} {unit}", "", None),
    ]


def run(*, quick: bool) -> list[Figure]:
    """Measure in process, then on a throwaway PostgreSQL server; return the figures."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    figures = _figures("in process, per round", asyncio.run(_one_by_one(None, rounds)), "µs")
    try:
        server = start_server()
    except PgUnavailableError as exc:
        return [*figures, Figure(GROUP, "PostgreSQL", f"skipped: {exc}", "", None)]
    try:
        alone, together = asyncio.run(_on_postgres(server.url(server.create_database()), rounds))
    finally:
        server.stop()
    figures += _figures("PostgreSQL, one round at a time", alone)
    figures += _figures(f"PostgreSQL, {CONCURRENT} rounds starting at once", together)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print the figures."""
    parser = group_parser(__doc__, quick="fewer rounds", rebuild="nothing to rebuild")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures("Round holds (one round at a time per owner)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
