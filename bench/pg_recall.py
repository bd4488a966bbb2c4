"""Recall on PostgreSQL: its cost per round by a 20-message window, and its hits, at 100k / 10k.

The same conversation as `recall.py` (the same planted facts, the same
mentions), on a throwaway PostgreSQL server started from the distribution's
binaries (`tests/support/pgserver.py`, as the tests do; fsync off, loopback TCP).
The history is built afresh each run, with COPY: 100k messages of one owner
and 10k memories (`--quick`: 20k / 2k), both under pg_trgm GIN indexes.

Figures:

- warm: the window moved by one message (the chat app's insert not timed),
  term counts of earlier rounds cached: what a heartbeat after a new message
  pays. PostgreSQL keeps the indexes itself, so no round indexes anything.
- idle: the same window again (a heartbeat with nothing new). PostgreSQL
  has no result cache: the same queries run again and give the same list.
- cold: a store with no cached counts (a worker just started).
- hit rate and false recall, as in `recall.py`.

Target: warm median < 10 ms (a round on PostgreSQL pays a network round trip
per read; SQLite's 3 ms target is for a read on the loop's own thread).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from datetime import UTC, datetime, timedelta

from common import (
    OWNER,
    PERSONA_ID,
    TESTS,
    Figure,
    exit_on_sigterm,
    generate_history,
    group_parser,
    message_text,
    percentile,
    print_figures,
    write_figures,
)
from recall import FACTS, MENTIONED, WINDOW, Measured, Planted, _conversation, _rate, measure_round

sys.path.insert(0, str(TESTS))
from support.pgserver import (  # tests/ joins the path above
    PgServer,
    PgUnavailableError,
    start_server,
)

GROUP = "pg_recall"
SIZE = (100_000, 10_000)  # (messages, memories) of one owner
QUICK_SIZE = (20_000, 2_000)
ROUNDS = 240
QUICK_ROUNDS = 112
TARGET_MEDIAN_MS = 10.0  # milliseconds
END = datetime(2026, 11, 1, tzinfo=UTC)  # the history ends here; the conversation goes on after


def _build(server: PgServer, url: str, messages: int, memories: int) -> Planted:
    """Migrate an empty database, COPY the history and memories in, plant the facts."""
    import psycopg

    from backthink.store import open_store

    async def migrate() -> None:
        db, _, _ = await open_store(url)
        await db.dispose()

    asyncio.run(migrate())
    database = url.rsplit("/", 1)[1]
    rng = random.Random(20261201)
    conninfo = f"host=127.0.0.1 port={server.port} user=postgres dbname={database}"
    with psycopg.connect(conninfo) as conn:
        columns = "owner_id, session_id, role, text, speaker, channel, origin, created_at"
        with conn.cursor().copy(f"COPY message ({columns}) FROM STDIN") as copy:
            for row in generate_history(OWNER, messages, end=END, rng=rng):
                copy.write_row((*row[:7], row[7] + "+00"))
        start = END - timedelta(days=400)
        kinds = ("note", "profile", "thought", "thought")
        with conn.cursor().copy(
            "COPY memory (owner_id, kind, text, created_at, source) FROM STDIN"
        ) as copy:
            for i in range(memories):
                text = message_text(rng, assistant=True)
                copy.write_row((OWNER, kinds[i % 4], text, start + timedelta(minutes=i), "chat"))
        users = [
            i
            for (i,) in conn.execute(
                "SELECT id FROM message WHERE role = 'user' AND id <= %s ORDER BY id",
                (messages // 2,),
            )
        ]
        plant = random.Random(20261202)
        message_ids = plant.sample(users, len(FACTS))
        memory_ids = plant.sample(range(1, memories // 2 + 1), len(FACTS))
        planted = Planted({}, {})
        for fact, (text, _) in enumerate(FACTS):
            if fact % 2 == 0 or fact % 4 == 3:
                conn.execute(
                    "UPDATE message SET text = %s WHERE id = %s", (text, message_ids[fact])
                )
                planted.messages[fact] = [message_ids[fact]]
            if fact % 2 == 1 or fact % 4 == 0:
                conn.execute("UPDATE memory SET text = %s WHERE id = %s", (text, memory_ids[fact]))
                planted.memories[fact] = [memory_ids[fact]]
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return planted


async def _measure(server: PgServer, url: str, planted: Planted, rounds: int) -> Measured:
    """Run the conversation; time each round's recall, then its idle repeat."""
    import psycopg

    from backthink.store import SqlMemoryStore, open_store

    database, messages, _ = await open_store(url)
    store = SqlMemoryStore(database)
    name = url.rsplit("/", 1)[1]
    chat = await psycopg.AsyncConnection.connect(
        f"host=127.0.0.1 port={server.port} user=postgres dbname={name}", autocommit=True
    )  # the chat app's own connection
    out = Measured([], [], [])
    try:
        at = END
        said: list[int | None] = []
        for i, (role, text, fact) in enumerate(_conversation(rounds + WINDOW, random.Random(9))):
            at += timedelta(minutes=1)
            await chat.execute(
                "INSERT INTO message (owner_id, session_id, role, text, speaker, origin,"
                " created_at) VALUES (%s, 'main', %s, %s, %s, 'chat', %s)",
                (OWNER, role, text, PERSONA_ID if role == "assistant" else None, at),
            )
            said.append(fact)
            await measure_round(i, database, messages, store, said, planted, out)
    finally:
        await chat.close()
        await database.dispose()
    return out


def run(*, quick: bool) -> list[Figure]:
    """Start a server, build the history, measure; return the figures."""
    messages, memories = QUICK_SIZE if quick else SIZE
    try:
        server = start_server()
    except PgUnavailableError as exc:
        return [Figure(GROUP, "skipped", f"no PostgreSQL server: {exc}", "", None)]
    try:
        url = server.url(server.create_database())
        started = time.perf_counter()
        planted = _build(server, url, messages, memories)
        built = time.perf_counter() - started
        got = asyncio.run(_measure(server, url, planted, QUICK_ROUNDS if quick else ROUNDS))
    finally:
        server.stop()
    where = f"{messages:,} msgs / {memories:,} memories"
    median = percentile(got.warm, 50)
    rows = [
        (f"build (COPY, GIN indexes, VACUUM) @ {where}", f"{built:.1f} s"),
        (f"warm p95 @ {where}", f"{percentile(got.warm, 95):.2f} ms"),
        (f"idle median (same window again) @ {where}", f"{percentile(got.cached, 50):.2f} ms"),
        (f"cold median @ {where}", f"{percentile(got.cold, 50):.2f} ms"),
        (
            f"hit rate (mention in newest {MENTIONED}) @ {where}",
            _rate(got.hits, got.mention_windows),
        ),
        (
            f"false recall (no mention in {WINDOW}) @ {where}",
            _rate(got.false_recalls, got.quiet_windows),
        ),
    ]
    return [
        Figure(
            GROUP,
            f"warm median (window moved by one message) @ {where}",
            f"{median:.2f} ms",
            f"< {TARGET_MEDIAN_MS:g} ms",
            median < TARGET_MEDIAN_MS,
        ),
        *(Figure(GROUP, label, value, "", None) for label, value in rows),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__, quick="20k messages / 2k memories, fewer rounds", rebuild="(always built afresh)"
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures("8. Recall on PostgreSQL (one recall by a 20-message window)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
