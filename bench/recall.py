"""Recall latency: one recall by a 20-message window, at a small and at a large history."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta

from common import (
    OWNER,
    SQLITE_STAMP,
    Figure,
    exit_on_sigterm,
    group_parser,
    history_db,
    message_text,
    percentile,
    print_figures,
    write_figures,
)

GROUP = "recall"
SIZES = ((1_000, 1_000), (1_000_000, 100_000))  # (messages, memories) of one owner
QUICK_SIZES = ((1_000, 1_000), (100_000, 10_000))
WINDOW = 20  # messages a round shows the model, and recall is queried by
RECALLS = 300  # measured recalls per size, each by another window of the history
QUICK_RECALLS = 100
TARGET_MEDIAN_MS = 3.0  # milliseconds: recall may add no more than this to a round


def _fill_memories(db: str, count: int) -> None:
    """Give the owner exactly `count` memories (kept between runs, like the history)."""
    with sqlite3.connect(db) as conn:
        if conn.execute("SELECT count(*) FROM memory").fetchone()[0] == count:
            return
        conn.execute("DELETE FROM memory")
        rng = random.Random(20261201)
        start = datetime.now(UTC) - timedelta(days=400)
        kinds = ("note", "profile", "thought", "thought")
        conn.executemany(
            "INSERT INTO memory (owner_id, kind, text, created_at, source) VALUES (?, ?, ?, ?, ?)",
            (
                (
                    OWNER,
                    kinds[i % len(kinds)],
                    message_text(rng, assistant=True),
                    (start + timedelta(minutes=i)).strftime(SQLITE_STAMP),
                    "chat",
                )
                for i in range(count)
            ),
        )


async def _measure(db: str, max_id: int, recalls: int) -> tuple[list[float], list[float], int]:
    """Recall by `recalls` windows of the history; (warm ms, cold ms, windows that recalled)."""
    from backthink.store import SqlMemoryStore, SqlMessageStore, open_store

    database, messages, _ = await open_store(f"sqlite+aiosqlite:///{db}")
    store = SqlMemoryStore(database)
    rng = random.Random(7)
    warm: list[float] = []
    cold: list[float] = []
    hits = 0
    try:
        assert isinstance(messages, SqlMessageStore)
        newest = await messages.recent(OWNER, WINDOW * recalls)
        windows = [newest[i : i + WINDOW] for i in range(0, len(newest) - WINDOW, WINDOW)]
        rng.shuffle(windows)
        for i, window in enumerate(windows[:recalls]):
            # The first recall by a window reads its terms' counts; a round repeats
            # most of them (the window moves by a message or two).
            fresh = SqlMemoryStore(database) if i % 10 == 0 else None
            if fresh is not None:
                started = time.perf_counter()
                await fresh.recall(OWNER, window, limit=5, max_chars=1200)
                cold.append((time.perf_counter() - started) * 1000)
            await store.recall(OWNER, window, limit=5, max_chars=1200)
            started = time.perf_counter()
            found = await store.recall(OWNER, window, limit=5, max_chars=1200)
            warm.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
    finally:
        await database.dispose()
    return warm, cold, hits


def run(*, quick: bool, rebuild: bool) -> list[Figure]:
    """Measure every size; return the figures."""
    figures: list[Figure] = []
    medians: dict[int, float] = {}
    sizes = QUICK_SIZES if quick else SIZES
    recalls = QUICK_RECALLS if quick else RECALLS
    for messages, memories in sizes:
        history = history_db(f"recall-{messages}", [OWNER], messages, rebuild=rebuild)
        _fill_memories(str(history.path), memories)
        warm, cold, hits = asyncio.run(_measure(str(history.path), history.max_id, recalls))
        median = percentile(warm, 50)
        medians[messages] = median
        largest = (messages, memories) == sizes[-1]
        where = f"{messages:,} msgs / {memories:,} memories"
        figures += [
            Figure(
                GROUP,
                f"median @ {where}",
                f"{median:.2f} ms",
                f"< {TARGET_MEDIAN_MS:g} ms" if largest else "",
                median < TARGET_MEDIAN_MS if largest else None,
            ),
            Figure(GROUP, f"p95 @ {where}", f"{percentile(warm, 95):.2f} ms", "", None),
            Figure(GROUP, f"cold median @ {where}", f"{percentile(cold, 50):.2f} ms", "", None),
            Figure(GROUP, f"windows recalling @ {where}", f"{hits}/{len(warm)}", "", None),
        ]
    first, last = sizes[0][0], sizes[-1][0]
    figures.append(
        Figure(
            GROUP,
            f"median ratio {last:,} / {first:,}",
            f"{medians[last] / medians[first]:.2f}",
            "",
            None,
        )
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__,
        quick="100k messages / 10k memories at most, fewer recalls",
        rebuild="rebuild the cached databases",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick, rebuild=args.rebuild)
    print_figures("7. Recall (one recall by a 20-message window)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
