"""Recall on LoCoMo: how many evidence turns a round's request holds, beside a plain BM25.

Usage: `python bench/locomo.py PATH [--recall N] [--max-chars N] [--store sqlite|memory]`,
PATH a LoCoMo JSON file (a list of conversations; each has `speaker_a`,
`speaker_b`, `session_N` and `session_N_date_time`, at the top level or under
`conversation`, and `qa`). The data is read from PATH only, never copied.

For each conversation, every session is imported as main-session messages of
one owner: `speaker_a` is the owner (role user), `speaker_b` the companion
(role assistant). Turn i of a session is written at the session's start plus
i minutes, every date shifted so the last turn ends two hours ago. Then, for
each question of categories 1-4, the question is written as the owner's
newest message and the round's request is built as `think --dry-run` builds
it (the Thinker's `prepare`: the window, the memory block, the prompt); no
model is called. Questions with an evidence turn inside the window (the
messages the request shows) are left out. An evidence turn counts as
recalled when its text is in the request. The question is deleted again
before the next one.

Beside it, in the same run, a plain BM25 (k1 1.2, b 0.75; lowercase runs of
letters and digits) ranks the same turns outside the window with the
question as the query, and takes the best turns that fit the same character
budget (`memory.max_chars`, skipping a turn that no longer fits), as the
memory block would show them. Its evidence turn counts as recalled on the
same test: its text is in the window or in the turns taken.

Printed: evidence recall per category and overall for both, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

OWNER = "owner"
CATEGORIES = (1, 2, 3, 4)
K1 = 1.2
B = 0.75
_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y")
_TOKEN = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation: its dia_id, who said it (a or b), its text, when."""

    dia_id: str
    owner: bool
    text: str
    at: datetime


@dataclass(frozen=True)
class Question:
    """A question of the conversation, its category and its evidence dia_ids."""

    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """One conversation: its turns in order and its questions."""

    name: str
    turns: list[Turn]
    questions: list[Question]


def _date(value: str) -> datetime:
    for form in _DATE_FORMATS:
        try:
            return datetime.strptime(value.strip(), form).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unreadable session date {value!r}")


def _evidence(raw: Any) -> tuple[str, ...]:
    """Evidence dia_ids, split where one string holds several ("D1:3; D2:4")."""
    found: list[str] = []
    for item in raw or []:
        found += re.findall(r"D\d+:\d+", str(item))
    return tuple(dict.fromkeys(found))


def load(path: Path, now: datetime) -> list[Conversation]:
    """Read the conversations of a LoCoMo file, dates shifted so the last turn is 2 h before now."""
    raw = json.loads(path.read_text("utf-8"))
    conversations: list[Conversation] = []
    for n, item in enumerate(raw):
        conv = item.get("conversation", item)
        a = conv["speaker_a"]
        sessions: list[tuple[int, datetime, list[dict[str, Any]]]] = []
        for key, turns in conv.items():
            match = _SESSION.fullmatch(key)
            if match is None or not isinstance(turns, list) or not turns:
                continue
            sessions.append((int(match[1]), _date(conv[f"{key}_date_time"]), turns))
        sessions.sort(key=lambda s: (s[1], s[0]))
        turns_out: list[Turn] = []
        for _, start, turns in sessions:
            for i, turn in enumerate(turns):
                at = start + timedelta(minutes=i)
                turns_out.append(Turn(turn["dia_id"], turn["speaker"] == a, turn["text"], at))
        shift = now - timedelta(hours=2) - turns_out[-1].at
        turns_out = [Turn(t.dia_id, t.owner, t.text, t.at + shift) for t in turns_out]
        questions = [
            Question(str(q["question"]), int(q["category"]), _evidence(q.get("evidence")))
            for q in item.get("qa", [])
            if int(q.get("category", 0)) in CATEGORIES
        ]
        conversations.append(Conversation(str(item.get("sample_id", n)), turns_out, questions))
    return conversations


def tokens(text: str) -> list[str]:
    """BM25's tokens: lowercase runs of letters and digits."""
    return _TOKEN.findall(text.lower())


class Bm25:
    """Okapi BM25 over a fixed list of documents."""

    def __init__(self, documents: Sequence[str]) -> None:
        self.docs = [Counter(tokens(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / max(len(self.docs), 1)
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log((n - c + 0.5) / (c + 0.5) + 1) for t, c in df.items()}

    def scores(self, query: str, allowed: Sequence[int]) -> list[tuple[float, int]]:
        """(score, index) of the allowed documents that match, best first (newer on ties)."""
        terms = tokens(query)
        out: list[tuple[float, int]] = []
        for i in allowed:
            doc, length = self.docs[i], self.lengths[i]
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    norm = tf + K1 * (1 - B + B * length / self.avg)
                    score += self.idf[term] * tf * (K1 + 1) / norm
            if score > 0:
                out.append((score, i))
        out.sort(key=lambda item: (-item[0], -item[1]))
        return out


def fold(text: str) -> str:
    """A text as the request shows it: whitespace runs folded to one space."""
    return " ".join(text.split())


@dataclass
class Tally:
    """Evidence turns found and looked for, per category."""

    found: Counter[int] = field(default_factory=Counter)
    total: Counter[int] = field(default_factory=Counter)

    def add(self, category: int, found: int, total: int) -> None:
        self.found[category] += found
        self.total[category] += total

    def rate(self, category: int | None = None) -> float:
        if category is None:
            whole = sum(self.total.values())
            return sum(self.found.values()) / whole if whole else 0.0
        return self.found[category] / self.total[category] if self.total[category] else 0.0


@dataclass
class Result:
    """Both tallies, and the questions asked, per category."""

    ours: Tally = field(default_factory=Tally)
    bm25: Tally = field(default_factory=Tally)
    questions: Counter[int] = field(default_factory=Counter)
    misses: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0


def _settings(url: str, recall: int | None, max_chars: int | None) -> Any:
    from backthink.config import Settings

    memory: dict[str, Any] = {}
    if recall is not None:
        memory["recall"] = recall
    if max_chars is not None:
        memory["max_chars"] = max_chars
    return Settings.model_validate(
        {
            "owner": {"id": OWNER, "name": "", "timezone": "UTC"},
            "database": {"url": url},
            "prompt": {"language": "en"},
            "memory": memory,
        }
    )


async def _run_one(
    conv: Conversation,
    workdir: Path,
    now: datetime,
    *,
    store: str,
    recall: int | None,
    max_chars: int | None,
    out: Result,
) -> None:
    from backthink.host.app import AppOverrides, build_app
    from backthink.models import Message
    from backthink.store import SqlStores, Stores, VolatileStores, open_store
    from backthink.testing import FakeClock, StaticState

    url = f"sqlite+aiosqlite:///{workdir / (conv.name + '.db')}"
    settings = _settings(url, recall, max_chars)
    db = None
    stores: Stores
    if store == "memory":
        stores = VolatileStores.empty()
    else:
        db, _, _ = await open_store(url)
        stores = SqlStores.over(db)
    messages: Any = stores.messages
    memories: Any = stores.memories
    try:
        stored = [
            Message(
                owner_id=OWNER,
                role="user" if t.owner else "assistant",
                text=t.text,
                speaker=None if t.owner else "companion",
                created_at=t.at,
            )
            for t in conv.turns
        ]
        await messages.add_many(stored)
        if store != "memory":
            await memories.index()
        ids = [m.id for m in await messages.recent(OWNER, len(stored) + 1)]
        by_dia = {t.dia_id: (ids[i], t.text) for i, t in enumerate(conv.turns)}
        texts = [t.text for t in conv.turns]
        bm25 = Bm25(texts)
        app = build_app(
            settings,
            stores,
            AppOverrides(
                model=None,
                clock=FakeClock(now),
                state=StaticState(),
                channels={},
                persona_prompt="",
            ),
        )
        budget = settings.memory.max_chars
        for q in conv.questions:
            evidence = [by_dia[d] for d in q.evidence if d in by_dia]
            if not evidence:
                continue
            asked = await messages.add(
                Message(owner_id=OWNER, role="user", text=q.text, created_at=now)
            )
            try:
                request = await app.thinker.prepare(OWNER, "heartbeat")
            finally:
                await _delete(messages, memories, asked.id)
            shown = {m.id for m in request.recent}
            if any(i in shown for i, _ in evidence):
                continue
            out.questions[q.category] += 1
            whole = "\n".join(fold(m.text) for m in request.messages)
            ours = [fold(text) in whole for _, text in evidence]
            window = "\n".join(fold(m.text) for m in request.recent)
            outside = [i for i, t in enumerate(conv.turns) if ids[i] not in shown]
            taken: list[str] = []
            used = 0
            for _, i in bm25.scores(q.text, outside):
                if used + len(texts[i]) > budget:
                    continue
                taken.append(fold(texts[i]))
                used += len(texts[i])
            theirs_text = window + "\n" + "\n".join(taken)
            theirs = [fold(text) in theirs_text for _, text in evidence]
            out.ours.add(q.category, sum(ours), len(evidence))
            out.bm25.add(q.category, sum(theirs), len(evidence))
            for (_, text), hit, other in zip(evidence, ours, theirs, strict=True):
                if not hit:
                    out.misses.append((q.text, text, "bm25 found it" if other else ""))
    finally:
        if db is not None:
            await db.dispose()


async def _delete(messages: Any, memories: Any, message_id: int | None) -> None:
    """Take the question out again: its row (and its index entries, had any been made)."""
    from backthink.store import VolatileMessageStore

    if isinstance(messages, VolatileMessageStore):
        for session in messages._sessions.values():
            session[:] = [m for m in session if m.id != message_id]
        return
    from backthink.store import fulltext

    def run(conn: Any) -> None:
        (body,) = conn.exec_driver_sql("SELECT text FROM message WHERE id = ?", (message_id,)).one()
        fulltext.unindex(conn, "message", int(message_id or 0), body)
        conn.exec_driver_sql("DELETE FROM message WHERE id = ?", (message_id,))

    await memories._db.write(run)


def report(result: Result) -> str:
    """The table: evidence recall per category and overall, both rankings and the ratio."""
    lines = [
        f"{'category':<10}{'questions':>10}{'evidence':>10}{'backthink':>12}{'BM25':>12}"
        f"{'ratio':>8}"
    ]
    for c in [*CATEGORIES, None]:
        ours, theirs = result.ours.rate(c), result.bm25.rate(c)
        asked = result.questions[c] if c is not None else sum(result.questions.values())
        total = result.ours.total[c] if c is not None else sum(result.ours.total.values())
        found = result.ours.found[c] if c is not None else sum(result.ours.found.values())
        other = result.bm25.found[c] if c is not None else sum(result.bm25.found.values())
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        lines.append(
            f"{('all' if c is None else str(c)):<10}{asked:>10}{total:>10}"
            f"{f'{100 * ours:.1f}% ({found})':>12}{f'{100 * theirs:.1f}% ({other})':>12}"
            f"{ratio:>8}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison on every conversation of the file and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a LoCoMo JSON file")
    parser.add_argument("--recall", type=int, default=None, help="memory.recall (items)")
    parser.add_argument("--max-chars", type=int, default=None, help="memory.max_chars")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--misses", type=Path, default=None, help="write missed evidence here")
    args = parser.parse_args(argv)
    now = datetime.now(UTC).replace(microsecond=0)
    conversations = load(args.path, now)
    result = Result()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        for conv in conversations:
            asyncio.run(
                _run_one(
                    conv,
                    Path(tmp),
                    now,
                    store=args.store,
                    recall=args.recall,
                    max_chars=args.max_chars,
                    out=result,
                )
            )
    result.seconds = time.perf_counter() - started
    settings = _settings("sqlite://", args.recall, args.max_chars)
    print(
        f"LoCoMo evidence recall: {len(conversations)} conversations, {args.store} store,"
        f" memory.recall {settings.memory.recall}, memory.max_chars {settings.memory.max_chars}"
        f" ({result.seconds:.0f} s)"
    )
    print(report(result))
    if args.misses is not None:
        args.misses.write_text(
            "\n".join(json.dumps(m, ensure_ascii=False) for m in result.misses) + "\n", "utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
