"""Recall: its cost per round by a 20-message window, and its hits, at a small and a large history.

Distinct facts (named people, places, events; Chinese and English) are
planted far back in the history and among the memories. A conversation then
goes on: each round the chat app writes one message (not timed), and recall
runs by the newest 20. Now and then a user message talks about one planted
fact, in other words than the fact's.

Figures per size:

- warm: the honest per-round cost. The window moved by one message, so the
  query is new, and the term counts of earlier rounds are warm. New window
  messages are indexed once the window has moved past them (a write every
  twenty rounds or so, of twenty rows), so the median is a round without
  that write; p95 and the mean include it. The target applies to the median.
- cached idle: the same window again (a heartbeat with nothing new), served
  from the result cache after one read checking its rows still exist.
- cold: a store with no cached counts at all (a daemon just started).
- hit rate: windows whose newest messages (those recall takes its terms
  from) mention a planted fact, that recall a row holding that fact.
- false recall: windows with no mention in any of their 20 messages, that
  recall anything at all.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import (
    OWNER,
    PERSONA_ID,
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

from backthink.memory.scoring import WINDOW_MESSAGES
from backthink.memory.terms import index_text

GROUP = "recall"
SIZES = ((1_000, 1_000), (1_000_000, 100_000))  # (messages, memories) of one owner
QUICK_SIZES = ((1_000, 1_000), (100_000, 10_000))
WINDOW = 20  # messages a round shows the model, and recall is queried by
MENTIONED = WINDOW_MESSAGES  # a fact counts as mentioned in the messages recall's terms come from
ROUNDS = 480  # measured rounds per size, each after one new message
QUICK_ROUNDS = 168
CYCLE = 28  # one mention, then 27 other messages: 8 mention windows, 8 quiet ones
COLD_EVERY = 12  # rounds between two cold recalls
TARGET_MEDIAN_MS = 3.0  # milliseconds: recall may add no more than this to a round
FACTS_FORMAT = 1  # bump when FACTS change, so they are planted again

# (fact, a later message about it in other words). Every mention shares a name
# or a place of three characters or more, and one more term, with its fact.
FACTS: tuple[tuple[str, str], ...] = (
    ("我表姐欧阳雪下个月在青岛办婚礼", "欧阳雪在青岛的婚礼我该送什么"),
    (
        "my cousin Bartholomew is moving to Reykjavik in March",
        "did Bartholomew find a flat in Reykjavik yet?",
    ),
    ("高中同学诸葛明在深圳开了家猫咖啡馆", "诸葛明的猫咖啡馆生意怎么样"),
    (
        "I adopted a greyhound called Biscuit last spring",
        "the greyhound chewed my shoes again, Biscuit is hopeless",
    ),
    ("去年在景德镇学拉坯，做了一个歪歪扭扭的碗", "景德镇那个歪歪扭扭的碗还在吗"),
    (
        "the Kilimanjaro trek is booked for October",
        "should I buy new boots for the Kilimanjaro trek?",
    ),
    ("我家的橘猫叫芝麻糊，今年三岁了", "我家的橘猫芝麻糊又胖了"),
    (
        "my grandmother grew up in Valparaiso by the harbour",
        "tell me again about grandma's childhood in Valparaiso",
    ),
    ("小时候在呼伦贝尔草原骑过一次马", "好想再去呼伦贝尔草原骑马"),
    (
        "our book club is reading Middlemarch this month",
        "I'm halfway through Middlemarch for book club",
    ),
    ("表弟司马骏考上了哈尔滨工业大学", "司马骏在哈尔滨工业大学读什么专业"),
    (
        "my neighbour Ferdinand repairs vintage motorcycles",
        "Ferdinand fixed another vintage motorcycle today",
    ),
    ("上个月在鼓浪屿丢了一把蓝色的雨伞", "鼓浪屿那把蓝色的雨伞找回来了吗"),
    (
        "I broke my wrist snowboarding in Hokkaido",
        "my wrist still hurts from that Hokkaido snowboarding trip",
    ),
    ("奶奶的八十大寿定在腊月初八", "奶奶八十大寿那天要穿什么"),
    (
        "my sister plays the oboe in the Rotterdam youth orchestra",
        "the Rotterdam orchestra concert is sold out",
    ),
    ("我们乐队叫铁皮鹦鹉，每周四排练", "铁皮鹦鹉乐队这周四还排练吗"),
    (
        "my first car was a rusty Volkswagen named Clementine",
        "I miss Clementine, that rusty old Volkswagen",
    ),
    ("室友慕容婷在学做提拉米苏", "慕容婷的提拉米苏做成功了没"),
    ("we're planning a canoe trip on the Okavango delta", "any tips for the Okavango canoe trip?"),
    ("上周在西双版纳看到了野生亚洲象", "西双版纳的亚洲象视频发我看看"),
    ("my landlord Thaddeus raised the rent again", "Thaddeus wants to inspect the apartment"),
    ("我的毕业论文题目是敦煌壁画的颜料分析", "敦煌壁画颜料那部分写完了吗"),
    (
        "my brother Cornelius is a glaciologist in Svalbard",
        "Cornelius sent photos of glaciers from Svalbard",
    ),
    ("爸爸在阿勒泰的牧场养了六匹马", "阿勒泰牧场那六匹马还好吗"),
    (
        "my daughter's hamster is called Pumpernickel",
        "Pumpernickel escaped from his cage last night",
    ),
    ("同事欧阳锋下周去冰岛看极光", "欧阳锋去冰岛看到极光了吗"),
    ("I keep a sourdough starter named Gerald", "Gerald the sourdough starter smells weird"),
    ("我在学古筝，轩辕老师很严格", "轩辕老师说我的古筝进步了"),
    (
        "my uncle Percival collects antique barometers",
        "Percival showed me another antique barometer",
    ),
    ("舅舅在舟山有一艘海鸥号渔船", "舅舅的海鸥号渔船修好了吗"),
    ("I'm restoring a harpsichord in the garage", "the harpsichord needs new quills"),
    ("姑姑在苏州平江路开了家评弹茶馆", "平江路那家评弹茶馆周末人多吗"),
    ("my colleague Winifred is retiring in June", "we're planning Winifred's farewell party"),
    ("明年春天想去三亚蜈支洲岛考潜水证", "蜈支洲岛的潜水证报名了吗"),
    ("we honeymooned in Zanzibar eight years ago", "our anniversary is coming, remember Zanzibar?"),
)


@dataclass(frozen=True)
class Planted:
    """Where each fact was planted: message ids and memory ids, by fact index."""

    messages: dict[int, list[int]]
    memories: dict[int, list[int]]

    def rows(self, fact: int) -> set[tuple[str, int]]:
        """The (kind, id) of every row holding one fact."""
        return {("message", i) for i in self.messages.get(fact, [])} | {
            ("memory", i) for i in self.memories.get(fact, [])
        }


def _fill_memories(conn: sqlite3.Connection, count: int) -> None:
    """Give the owner exactly `count` memories, indexed (kept between runs, like the history)."""
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
    conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")
    conn.execute("INSERT INTO memory_words(memory_words) VALUES ('delete-all')")
    conn.executemany(
        "INSERT INTO memory_words(rowid, text) VALUES (?, ?)",
        [(i, index_text(t)) for i, t in conn.execute("SELECT id, text FROM memory")],
    )


def _replace(conn: sqlite3.Connection, table: str, row_id: int, text: str) -> None:
    """Give one indexed row another text, its index entries with it."""
    fts, words = f"{table}_fts", f"{table}_words"
    (old,) = conn.execute(f"SELECT text FROM {table} WHERE id = ?", (row_id,)).fetchone()
    conn.execute(f"INSERT INTO {fts}({fts}, rowid, text) VALUES ('delete', ?, ?)", (row_id, old))
    conn.execute(
        f"INSERT INTO {words}({words}, rowid, text) VALUES ('delete', ?, ?)",
        (row_id, index_text(old)),
    )
    conn.execute(f"UPDATE {table} SET text = ? WHERE id = ?", (text, row_id))
    conn.execute(f"INSERT INTO {fts}(rowid, text) VALUES (?, ?)", (row_id, text))
    conn.execute(f"INSERT INTO {words}(rowid, text) VALUES (?, ?)", (row_id, index_text(text)))


def _plant(db: Path, max_id: int, memories: int) -> Planted:
    """Plant every fact in the oldest half of the history or among the memories, once.

    Even facts go into one old user message, odd ones into one memory, and
    every fourth into both; a sidecar file remembers where, and a run checks
    the rows still hold them.
    """
    sidecar = db.with_suffix(".facts.json")
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        _fill_memories(conn, memories)
        if sidecar.exists():
            saved = json.loads(sidecar.read_text("utf-8"))
            planted = Planted(
                {int(k): v for k, v in saved["messages"].items()},
                {int(k): v for k, v in saved["memories"].items()},
            )
            if saved.get("format") == FACTS_FORMAT and _still_planted(conn, planted):
                conn.execute("COMMIT")
                return planted
        rng = random.Random(20261202)
        users = [
            i
            for (i,) in conn.execute(
                "SELECT id FROM message WHERE role = 'user' AND id <= ? ORDER BY id", (max_id // 2,)
            )
        ]
        message_ids = rng.sample(users, len(FACTS))
        memory_ids = rng.sample(range(1, memories // 2 + 1), len(FACTS))
        planted = Planted({}, {})
        for fact, (text, _) in enumerate(FACTS):
            if fact % 2 == 0 or fact % 4 == 3:
                _replace(conn, "message", message_ids[fact], text)
                planted.messages[fact] = [message_ids[fact]]
            if fact % 2 == 1 or fact % 4 == 0:
                _replace(conn, "memory", memory_ids[fact], text)
                planted.memories[fact] = [memory_ids[fact]]
        conn.execute("COMMIT")
    finally:
        conn.close()
    doc = {"format": FACTS_FORMAT, "messages": planted.messages, "memories": planted.memories}
    sidecar.write_text(json.dumps(doc), "utf-8")
    return planted


def _still_planted(conn: sqlite3.Connection, planted: Planted) -> bool:
    for table, where in (("message", planted.messages), ("memory", planted.memories)):
        for fact, ids in where.items():
            for row_id in ids:
                row = conn.execute(f"SELECT text FROM {table} WHERE id = ?", (row_id,)).fetchone()
                if row is None or row[0] != FACTS[fact][0]:
                    return False
    return True


@dataclass
class Measured:
    """What the rounds of one size measured."""

    warm: list[float]
    cached: list[float]
    cold: list[float]
    mention_windows: int = 0
    hits: int = 0
    quiet_windows: int = 0
    false_recalls: int = 0


def _conversation(rounds: int, rng: random.Random) -> list[tuple[str, str, int | None]]:
    """(role, text, fact mentioned or None) of each new message: a mention every CYCLE."""
    order = list(range(len(FACTS)))
    rng.shuffle(order)
    lines: list[tuple[str, str, int | None]] = []
    role = "user"
    for i in range(rounds):
        if i % CYCLE == CYCLE // 2:
            fact = order[(i // CYCLE) % len(order)]
            lines.append(("user", FACTS[fact][1], fact))
            role = "assistant"
            continue
        lines.append((role, message_text(rng, assistant=role == "assistant"), None))
        role = "user" if role == "assistant" else ("user" if rng.random() < 0.15 else "assistant")
    return lines


async def measure_round(
    i: int,
    database: Any,
    messages: Any,
    store: Any,
    said: list[int | None],
    planted: Planted,
    out: Measured,
) -> None:
    """Time one round's recall by the newest window, and its idle repeat; tally hits.

    The first WINDOW rounds only warm the counts up. Every COLD_EVERY-th round
    also times a new store's first recall (`database` is the store's Database).
    """
    from backthink.store import SqlMemoryStore

    window = await messages.recent(OWNER, WINDOW)
    started = time.perf_counter()
    found = await store.recall(OWNER, window, limit=5, max_chars=1200)
    took = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    again = await store.recall(OWNER, window, limit=5, max_chars=1200)
    idle = (time.perf_counter() - started) * 1000
    assert again == found, "an idle round must recall exactly what the last one did"
    if i < WINDOW:
        return
    out.warm.append(took)
    out.cached.append(idle)
    if i % COLD_EVERY == 0:
        fresh = SqlMemoryStore(database)
        started = time.perf_counter()
        await fresh.recall(OWNER, window, limit=5, max_chars=1200)
        out.cold.append((time.perf_counter() - started) * 1000)
    recalled = {(r.kind, r.id) for r in found}
    mentioned = {f for f in said[-MENTIONED:] if f is not None}
    if mentioned:
        out.mention_windows += 1
        out.hits += any(recalled & planted.rows(f) for f in mentioned)
    elif not any(f is not None for f in said[-WINDOW:]):
        out.quiet_windows += 1
        out.false_recalls += bool(found)


async def _measure(db: Path, planted: Planted, rounds: int) -> Measured:
    """Run the conversation; time each round's recall, then its idle repeat."""
    from backthink.store import SqlMemoryStore, SqlMessageStore, open_store

    database, messages, _ = await open_store(f"sqlite+aiosqlite:///{db}")
    store = SqlMemoryStore(database)
    chat = sqlite3.connect(db, isolation_level=None)  # the chat app's own connection
    out = Measured([], [], [])
    try:
        assert isinstance(messages, SqlMessageStore)
        (last,) = chat.execute("SELECT max(created_at) FROM message").fetchone()
        at = datetime.strptime(last, SQLITE_STAMP).replace(tzinfo=UTC)
        said: list[int | None] = []
        # A few rounds before measuring, so the counts are those of a running daemon.
        for i, (role, text, fact) in enumerate(_conversation(rounds + WINDOW, random.Random(9))):
            at += timedelta(minutes=1)
            chat.execute(
                "INSERT INTO message (owner_id, session_id, role, text, speaker, origin,"
                " created_at) VALUES (?, 'main', ?, ?, ?, 'chat', ?)",
                (OWNER, role, text, PERSONA_ID if role == "assistant" else None,
                 at.strftime(SQLITE_STAMP)),
            )  # fmt: skip
            said.append(fact)
            await measure_round(i, database, messages, store, said, planted, out)
    finally:
        chat.close()
        await database.dispose()
    return out


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def run(*, quick: bool, rebuild: bool) -> list[Figure]:
    """Measure every size; return the figures."""
    figures: list[Figure] = []
    medians: dict[int, float] = {}
    sizes = QUICK_SIZES if quick else SIZES
    rounds = QUICK_ROUNDS if quick else ROUNDS
    for messages, memories in sizes:
        history = history_db(f"recall-{messages}", [OWNER], messages, rebuild=rebuild)
        planted = _plant(history.path, history.max_id, memories)
        got = asyncio.run(_measure(history.path, planted, rounds))
        median = percentile(got.warm, 50)
        medians[messages] = median
        largest = (messages, memories) == sizes[-1]
        where = f"{messages:,} msgs / {memories:,} memories"
        figures += [
            Figure(
                GROUP,
                f"warm median (window moved by one message) @ {where}",
                f"{median:.2f} ms",
                f"< {TARGET_MEDIAN_MS:g} ms" if largest else "",
                median < TARGET_MEDIAN_MS if largest else None,
            ),
            Figure(GROUP, f"warm p95 @ {where}", f"{percentile(got.warm, 95):.2f} ms", "", None),
            Figure(
                GROUP,
                f"warm mean (catch-ups included) @ {where}",
                f"{sum(got.warm) / len(got.warm):.2f} ms",
                "",
                None,
            ),
            Figure(
                GROUP,
                f"cached idle median (same window again) @ {where}",
                f"{percentile(got.cached, 50) * 1000:.0f} µs",
                "",
                None,
            ),
            Figure(GROUP, f"cold median @ {where}", f"{percentile(got.cold, 50):.2f} ms", "", None),
            Figure(
                GROUP,
                f"hit rate (mention in newest {MENTIONED}) @ {where}",
                _rate(got.hits, got.mention_windows),
                "",
                None,
            ),
            Figure(
                GROUP,
                f"false recall (no mention in {WINDOW}) @ {where}",
                _rate(got.false_recalls, got.quiet_windows),
                "",
                None,
            ),
        ]
    first, last = sizes[0][0], sizes[-1][0]
    figures.append(
        Figure(
            GROUP,
            f"warm median ratio {last:,} / {first:,}",
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
        quick="100k messages / 10k memories at most, fewer rounds",
        rebuild="rebuild the cached databases",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick, rebuild=args.rebuild)
    print_figures("7. Recall (one recall by a 20-message window, per round)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
