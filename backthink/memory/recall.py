"""Recall's pure logic: terms from the recent window, their weights, and what is kept.

Recall queries the full-text indexes with terms of the recent window and
keeps only strong, new matches. `backthink.memory.terms` makes the terms,
this module weighs, gates and keeps, and `backthink.memory.pipeline` runs
the steps over what a store gives:

1. Terms come from the newest `WINDOW_MESSAGES` messages: every two
   consecutive CJK characters, and the stem of every latin word (letters and
   digits) of at least `terms.MIN_WORD_CHARS` that is no function word
   (`terms.STOPWORDS`: pronouns, auxiliaries, question words, month and day names).
   A stem is the word less a common ending (`terms.stem`: painting, painted and
   paints give paint) and matches where a word of the text begins with it.
   The words index (`terms.index_text`, see `backthink.store.fulltext`) holds
   exactly these: latin words, matched by prefix, and CJK 2-grams, so a
   two-character Chinese word (胃镜) is found as readily as a name. Raw text
   is never handed to MATCH: each term is quoted.
2. A term weighs its recency (`RECENCY_DECAY` per message of age: the
   newest message weighs most by far) times its rarity, log(N / df),
   counted over what lies outside the window: a term only the window holds
   has df 0 and is dropped, as is one in more than one document in
   `DF_SHARE` (`df_cap`): a stock phrase the owner says all the time, or a
   word so common it tells nothing apart. Neither counts a CJK 2-gram that
   two stock phrases make where they meet (`stock_joints`: 啦哈 of
   就这些啦哈哈). Each index is queried with the
   best `TERMS` of the terms it holds (`best`), for the `CANDIDATES` rows
   holding the most weight of them.
3. Candidates are scored by the summed weights of the queried terms their
   current text holds, divided by their length as BM25 does (`LENGTH_NORM`),
   and gated: a row needs two matched terms of one window message (CJK
   2-grams that are no one 3-character string), or one latin word that is
   rare (`rare`) or long (`LONG_WORD_CHARS`). Otherwise
   top-k would always return something, however unrelated. The re-check
   against the text also drops a row whose index entries are stale (edited
   since it was indexed).
4. The message just before and just after each of the `NEIGHBOURS` best
   matched messages comes along as its context (`with_neighbours`): the
   answer a recalled question got, or a message on the same subject (it
   shares a term with the match, and no stock phrase: `stock`).
5. What repeats the window, or an item already kept, is dropped (trigram
   Jaccard similarity); the rest fills `max_chars`, best first.

Terms and shingles of a text are memoised: a round's window repeats most of
the previous round's messages.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from backthink.memory.terms import (
    CJK_RUN,
    cached_terms,
    holds,
    is_word,
    named,
    shingles,
    similarity,
)
from backthink.models import MemoryKind, Message, Origin, Recalled

WINDOW_MESSAGES = 4
"""How many of the newest window messages the terms come from."""
RECENCY_DECAY = 0.3
"""A term's weight is multiplied by this per message of age."""
TERMS = 8
"""How many terms a recall queries with; each costs about 0.1 ms per index."""
DF_CAP = 1000
"""Terms in more documents than this match too much to tell anything apart (and cost most)."""
DF_SHARE = 100
"""Nor does a term in more than one document in this many, in a history of any size..."""
DF_FLOOR = 20
"""...unless it is in this many documents or fewer: a young history's names are not common."""
CANDIDATES = 40
"""Rows read per index before the re-ranking."""
LONG_WORD_CHARS = 6
"""One matched latin word this long is enough on its own to recall a row."""
RARE_SHARE = 20
"""One matched latin word in at most one document in this many is enough on its own..."""
RARE_FLOOR = 3
"""...as is one in this many documents or fewer, in a history of any size..."""
RARE_CHARS = 4
"""...if it is this long at least (a shorter word is often part of a longer one), or a name."""
LENGTH_NORM = 0.3
"""How much a row's length divides its score (0: not at all), as BM25's b does."""
TYPICAL_CHARS = 100
"""The length at which a row's score is neither raised nor lowered."""
NEIGHBOURS = 3
"""The best matched messages whose neighbours (the message before, the one after) come along."""
NEIGHBOUR_SHARE = 0.8
"""A neighbour's score, as a share of its match's."""
SIMILAR = 0.5
"""Trigram Jaccard similarity at which two texts count as the same thing said twice."""
ITEM_CHARS = 600
"""One recalled text is cut past this many characters."""


def recency(window: Sequence[Message]) -> dict[str, float]:
    """Each term of the newest window messages with its recency weight (1.0 for the newest)."""
    weights: dict[str, float] = {}
    newest = list(window)[-WINDOW_MESSAGES:]
    for age, message in enumerate(reversed(newest)):
        factor = RECENCY_DECAY**age
        for term in cached_terms(message.text):
            if term not in weights:  # newest first: the first weight seen is the highest
                weights[term] = factor
    return weights


def df_cap(documents: int) -> int:
    """The most documents a usable term may be in, among `documents` (N)."""
    return min(DF_CAP, max(DF_FLOOR, documents // DF_SHARE))


def weigh(
    recent: Mapping[str, float],
    df: Mapping[str, int],
    documents: int,
    window: Sequence[Message] = (),
) -> dict[str, float]:
    """Weights of the usable terms, best first: recency times log(N / df).

    A term with no document outside the window (df 0), or in more than
    `df_cap` (one in `DF_SHARE`, at most `DF_CAP`), is left out. Besides
    telling nothing apart, such a term would make the query rank every row
    it is in. So is a CJK 2-gram that stock phrases make up where they meet
    in a window message (`stock_joints`): however they are cut, stock phrases
    weigh nothing.

    Args:
        recent: each window term's recency weight.
        df: each term's document count outside the window.
        documents: how many documents there are (N), about.
        window: the window the terms come from (for the joints of stock phrases).
    """
    weights: dict[str, float] = {}
    cap = df_cap(documents)
    joints = stock_joints(window, df, cap) if window else frozenset()
    for term, fresh in recent.items():
        count = df.get(term, 0)
        if 0 < count <= cap and term not in joints:
            weights[term] = fresh * math.log((documents + 1) / count)
    ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    return {term: weight for term, weight in ranked if weight > 0}


def stock_joints(window: Sequence[Message], df: Mapping[str, int], cap: int) -> frozenset[str]:
    """CJK 2-grams of the window lying inside stock phrases, wherever the window holds them.

    A 2-gram in more than `cap` documents is stock. Two stock phrases side by
    side (就这些啦 then 哈哈) give 2-grams across their joint (啦哈) that are
    rarer than either phrase; one whose two characters both lie inside stock
    2-grams is taken for such a joint.
    """
    joints: set[str] = set()
    clean: set[str] = set()
    for message in list(window)[-WINDOW_MESSAGES:]:
        for run in CJK_RUN.findall(message.text):
            covered = [False] * len(run)
            for i in range(len(run) - 1):
                if df.get(run[i : i + 2], 0) > cap:
                    covered[i] = covered[i + 1] = True
            for i in range(len(run) - 1):
                (joints if covered[i] and covered[i + 1] else clean).add(run[i : i + 2])
    return frozenset(joints - clean)


def best(weights: Mapping[str, float], df: Mapping[str, int], k: int = TERMS) -> list[str]:
    """The `k` heaviest terms (of `weigh`'s, best first) that occur in one index (df > 0)."""
    return [term for term in weights if df.get(term, 0) > 0][:k]


@dataclass(frozen=True)
class Candidate:
    """A row a full-text query found, before scoring."""

    kind: Literal["memory", "message"]
    id: int
    text: str
    created_at: datetime
    memory_kind: MemoryKind | None = None
    role: str | None = None
    origin: Origin | None = None


def rare(df: Mapping[str, int], documents: int) -> frozenset[str]:
    """The latin terms in few documents: specific enough to recall a row on their own.

    One shorter than `RARE_CHARS` is so only where the row writes it as a name
    or it is a number (`named`).
    """
    most = max(RARE_FLOOR, documents // RARE_SHARE)
    return frozenset(t for t, n in df.items() if is_word(t) and 0 < n <= most)


def strong(matched: Sequence[str], specific: Collection[str] = ()) -> bool:
    """The gate: two matched terms, or one rare or long latin word.

    CJK 2-grams count as two terms only when they are no one 3-character
    string (下周 and 周六 are 下周六, one word or two short ones): two apart
    or three.
    """
    words = [t for t in matched if is_word(t)]
    grams = [t for t in matched if not is_word(t)]
    if any(t in specific or len(t) >= LONG_WORD_CHARS for t in words):
        return True
    if len(words) >= 2 or (words and grams) or len(grams) >= 3:
        return True
    return len(grams) == 2 and not set(grams[0]) & set(grams[1])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


Scored = tuple[float, Candidate]
"""A candidate that passed the gate, and its score."""


def rank(
    candidates: Iterable[Candidate],
    weights: Mapping[str, float],
    window: Sequence[Message],
    *,
    specific: Collection[str] = (),
) -> list[Scored]:
    """Score and gate the candidates; the best first, the newer on ties.

    A candidate passes the gate (`strong`) on the terms it shares with one
    window message: two unrelated messages sharing a term each with it do
    not make it a match. Its score is the summed weights of the terms it
    holds, divided by its length (`LENGTH_NORM`).
    """
    scored: list[Scored] = []
    seen: set[tuple[str, int]] = set()
    said = [frozenset(cached_terms(m.text)) for m in list(window)[-WINDOW_MESSAGES:]]
    for candidate in candidates:
        if (candidate.kind, candidate.id) in seen:
            continue
        seen.add((candidate.kind, candidate.id))
        low = candidate.text.lower()
        matched = [term for term in weights if holds(low, term)]
        alone = {
            t
            for t in matched
            if t in specific and (len(t) >= RARE_CHARS or named(candidate.text, t))
        }
        if any(strong([t for t in matched if t in terms], alone) for terms in said):
            score = sum(weights[t] for t in matched)
            score /= 1 - LENGTH_NORM + LENGTH_NORM * len(candidate.text) / TYPICAL_CHARS
            scored.append((score, candidate))
    scored.sort(key=_best_first)
    return scored


def _best_first(item: Scored) -> tuple[float, float, int]:
    return (-item[0], -item[1].created_at.timestamp(), -item[1].id)


def anchors(scored: Sequence[Scored], k: int = NEIGHBOURS) -> list[int]:
    """The ids of the `k` best matched messages, whose neighbours come along (`with_neighbours`)."""
    return [c.id for _, c in scored if c.kind == "message"][:k]


def with_neighbours(
    scored: Sequence[Scored],
    neighbours: Mapping[int, Sequence[Candidate]],
    stock: Collection[str] = (),
) -> list[Scored]:
    """The scored candidates and the neighbours of their best messages, the best first.

    A message recalled alone is often half of an exchange: the answer
    without its question, or the question without its answer. The message
    just before and just after a best match (`anchors`) come along, each at
    `NEIGHBOUR_SHARE` of its match's score (or its own, if higher), without
    passing the gate themselves: they are recalled as that match's context.
    The one after a question is its answer; any other shares a term with
    the match that is not `stock` (on the same subject), so an everyday
    line beside a fact stays away, though it says the same stock phrase.

    Args:
        scored: `rank`'s list.
        neighbours: per anchor message id, the messages beside it.
        stock: `shared`'s terms too common to tell a subject (`stock`).
    """
    best = {(c.kind, c.id): (score, c) for score, c in scored}
    for score, candidate in scored:
        if candidate.kind != "message":
            continue
        for near in neighbours.get(candidate.id, ()):
            answers = _asks(candidate.text) and _order(near) > _order(candidate)
            if not answers and not _shared(candidate, near) - set(stock):
                continue
            share = score * NEIGHBOUR_SHARE
            if best.get((near.kind, near.id), (0.0, near))[0] < share:
                best[(near.kind, near.id)] = (share, near)
    return sorted(best.values(), key=_best_first)


def shared(scored: Sequence[Scored], neighbours: Mapping[int, Sequence[Candidate]]) -> set[str]:
    """The terms the best messages share with their neighbours: the ones `stock` is asked about."""
    return {
        term
        for _, candidate in scored
        if candidate.kind == "message"
        for near in neighbours.get(candidate.id, ())
        for term in _shared(candidate, near)
    }


def stock(df: Mapping[str, int], documents: int) -> frozenset[str]:
    """The terms in more than `df_cap` documents (the window's too): stock phrases, common words."""
    cap = df_cap(documents)
    return frozenset(term for term, count in df.items() if count > cap)


def _shared(candidate: Candidate, near: Candidate) -> frozenset[str]:
    return frozenset(cached_terms(near.text)) & frozenset(cached_terms(candidate.text))


def _order(candidate: Candidate) -> tuple[datetime, int]:
    return (candidate.created_at, candidate.id)


def _asks(text: str) -> bool:
    return "?" in text or "？" in text


def fill(
    scored: Iterable[Scored], window: Sequence[Message], *, limit: int, max_chars: int
) -> list[Recalled]:
    """De-duplicate and bound the scored candidates, the best first.

    A candidate near-identical to a window message or to a better one
    already kept is dropped; texts are cut at `ITEM_CHARS` and the kept
    texts together stay within `max_chars` (one that no longer fits is
    passed over for a shorter one after it), at most `limit` of them.
    """
    shown = [shingles(message.text) for message in window]
    kept: list[Recalled] = []
    used = 0
    for score, candidate in scored:
        if len(kept) >= limit:
            break
        own = shingles(candidate.text)
        if any(similarity(own, other) >= SIMILAR for other in shown):
            continue
        text = _cut(candidate.text, min(ITEM_CHARS, max_chars))
        if used + len(text) > max_chars:
            continue
        shown.append(own)
        used += len(text)
        kept.append(
            Recalled(
                kind=candidate.kind,
                id=candidate.id,
                text=text,
                created_at=candidate.created_at,
                score=round(score, 6),
                memory_kind=candidate.memory_kind,
                role=candidate.role,
                origin=candidate.origin,
            )
        )
    return kept
