"""Recall on the everyday set: the planted facts a round's recalled block holds, beside BM25.

Usage: `python bench/everyday.py [--data DIR] [--seed N ...] [--show]`, DIR
the everyday data folder (`generate.py` there builds the set from a seed;
default: `shared/data/everyday` beside the project or beside its parent).
The data is built in memory at run time, never copied.

For each seed, the 60-day history is written into a SQLite store as the
owner's main session; then, for each of the 40 probes, a copy of that
database gets the probe's 20-message window and `SqlMemoryStore.recall`
runs by it with the shipped `memory.recall` and `memory.max_chars`, as a
round would (no journal). A probe is recalled when its marker is in a
recalled item. Each item is sorted by what it is in the data: the fact, its
context, a decoy, another fact, or filler (everyday chatter).

Beside it, a plain BM25 (k1 1.2, b 0.75; the words index's tokens: latin
words, CJK 2-grams) ranks the history with the whole window as the query and
takes the best messages that fit the same character budget, skipping one
that no longer fits, as the memory block would show them.

Printed: per seed and language, facts recalled and filler items for both.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import math
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWNER = "default"
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
"""When the sets are dated: the seed decides what is said, this only when."""
K1 = 1.2
B = 0.75
LANGUAGES = ("zh", "en")


def _data_dir(given: Path | None) -> Path:
    """The everyday data folder: given, or shared/data/everyday beside the project or its parent."""
    candidates = [given] if given else [ROOT.parent / "shared", ROOT.parent.parent / "shared"]
    for base in candidates:
        assert base is not None
        folder = base if given else base / "data" / "everyday"
        if (folder / "generate.py").exists():
            return folder
    raise SystemExit("everyday: no data folder found (give --data DIR, the folder of generate.py)")


@dataclass
class Tally:
    """One method's results on one language: facts recalled, items, filler items."""

    probes: int = 0
    recalled: int = 0
    items: int = 0
    filler: int = 0

    def line(self) -> str:
        share = f"{100 * self.filler / self.items:.0f}%" if self.items else "-"
        return (
            f"{self.recalled:2}/{self.probes:<2}  filler {self.filler:3}/{self.items:<3} ({share})"
        )


@dataclass
class Seed:
    """A seed's tallies, per method and language."""

    seed: int
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)

    def tally(self, method: str, language: str) -> Tally:
        return self.tallies.setdefault((method, language), Tally())


def kind(label: str, probe_id: str) -> str:
    """What a recalled message is for a probe: fact, context, decoy, other (fact) or filler."""
    if label in (f"fact:{probe_id}", f"context:{probe_id}"):
        return label.split(":")[0]
    if label.startswith(("fact:", "context:")):
        return "other"
    return "filler" if label == "chat" else label.split(":")[0]


class Bm25:
    """Okapi BM25 over the history, on the words index's tokens (latin words, CJK 2-grams)."""

    def __init__(self, documents: Sequence[str]) -> None:
        from backthink.memory.terms import tokens

        self.tokens = tokens
        self.docs = [Counter(tokens(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / max(len(self.docs), 1)
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log((n - c + 0.5) / (c + 0.5) + 1) for t, c in df.items()}

    def best(self, query: str) -> list[int]:
        """Indices of the matching documents, best first (newer on ties)."""
        terms = self.tokens(query)
        scored: list[tuple[float, int]] = []
        for i, (doc, length) in enumerate(zip(self.docs, self.lengths, strict=True)):
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    score += (
                        self.idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / self.avg))
                    )
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda item: (-item[0], -item[1]))
        return [i for _, i in scored]


def _message(item: dict[str, Any]) -> Any:
    from backthink.models import Message

    at = datetime.fromisoformat(item["at"].replace("Z", "+00:00"))
    return Message(
        owner_id=OWNER,
        role=item["role"],
        text=item["text"],
        created_at=at,
        speaker=item.get("speaker"),
    )


async def _base(path: Path, history: list[dict[str, Any]]) -> None:
    """A SQLite file holding the history, indexed, in one self-contained file."""
    from backthink.store import SqlMemoryStore, open_store

    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    await messages.add_many([_message(m) for m in history])
    await SqlMemoryStore(db).index()
    await db.dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


async def _recall(base: Path, work: Path, window: list[dict[str, Any]]) -> list[str]:
    """The texts a round by `window` recalls, on a copy of the base database."""
    from backthink.config import MemorySettings
    from backthink.store import SqlMemoryStore, open_store

    shutil.copy(base, work)
    db, messages, _ = await open_store(f"sqlite+aiosqlite:///{work}")
    try:
        await messages.add_many([_message(m) for m in window])
        shown = await messages.recent(OWNER, len(window))
        shipped = MemorySettings()
        found = await SqlMemoryStore(db).recall(
            OWNER, shown, limit=shipped.recall, max_chars=shipped.max_chars
        )
        return [r.text for r in found]
    finally:
        await db.dispose()


def _bm25_block(
    bm25: Bm25, texts: Sequence[str], window: list[dict[str, Any]], budget: int
) -> list[int]:
    """The best BM25 matches of the window that fit `budget` characters together."""
    kept: list[int] = []
    used = 0
    for i in bm25.best("\n".join(m["text"] for m in window)):
        if used + len(texts[i]) <= budget:
            kept.append(i)
            used += len(texts[i])
    return kept


async def run_seed(build: Any, seed: int, folder: Path, *, show: bool) -> Seed:
    """Every probe of one seed, by recall and by BM25."""
    from backthink.config import MemorySettings

    data = build(NOW, seed)
    history, probes = data
    texts = [m["text"] for m in history]
    labels: dict[str, str] = {}
    for text, label in zip(texts, data.labels, strict=True):
        labels.setdefault(text, label)
    base = folder / f"base-{seed}.db"
    await _base(base, history)
    bm25 = Bm25(texts)
    budget = MemorySettings().max_chars
    out = Seed(seed)
    for probe in probes:
        pid, marker, language = probe["id"], probe["marker"], probe["lang"]
        found = await _recall(base, folder / "work.db", probe["window"])
        ours = out.tally("recall", language)
        ours.probes += 1
        ours.recalled += any(marker in t for t in found)
        kinds = [kind(labels.get(t.rstrip("…"), _label(labels, t)), pid) for t in found]
        ours.items += len(kinds)
        ours.filler += kinds.count("filler")
        block = _bm25_block(bm25, texts, probe["window"], budget)
        theirs = out.tally("bm25", language)
        theirs.probes += 1
        theirs.recalled += any(marker in texts[i] for i in block)
        theirs.items += len(block)
        theirs.filler += sum(kind(data.labels[i], pid) == "filler" for i in block)
        if show:
            mark = "ok  " if any(marker in t for t in found) else "miss"
            print(f"  {mark} {pid:16} {Counter(kinds)}")
    return out


def _label(labels: dict[str, str], shown: str) -> str:
    """The label of a history text a recalled item was cut from."""
    head = shown.rstrip("…")
    return next((label for text, label in labels.items() if text.startswith(head)), "unknown")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="the everyday data folder")
    parser.add_argument("--seed", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--show", action="store_true", help="print each probe's outcome")
    args = parser.parse_args(argv)
    folder = _data_dir(args.data)
    sys.path.insert(0, str(folder))
    sys.dont_write_bytecode = True  # leave the data folder as it is
    build = importlib.import_module("generate").build
    started = time.monotonic()
    seeds: list[Seed] = []
    with tempfile.TemporaryDirectory(prefix="everyday-") as work:
        for seed in args.seed:
            seeds.append(asyncio.run(run_seed(build, seed, Path(work), show=args.show)))
    took = time.monotonic() - started
    print(f"Everyday recall: seeds {', '.join(map(str, args.seed))} ({took:.0f} s)")
    print(f"{'seed':6} {'lang':5} {'backthink':30} {'BM25, same budget':30}")
    total: dict[tuple[str, str], Tally] = {}
    for s in seeds:
        for language in LANGUAGES:
            ours, theirs = s.tally("recall", language), s.tally("bm25", language)
            print(f"{s.seed:<6} {language:5} {ours.line():30} {theirs.line():30}")
            for method, t in (("recall", ours), ("bm25", theirs)):
                sum_ = total.setdefault((method, language), Tally())
                sum_.probes += t.probes
                sum_.recalled += t.recalled
                sum_.items += t.items
                sum_.filler += t.filler
    for language in LANGUAGES:
        ours, theirs = total[("recall", language)], total[("bm25", language)]
        print(f"{'all':6} {language:5} {ours.line():30} {theirs.line():30}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
