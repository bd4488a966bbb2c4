"""Recall's pure logic: terms from the recent window, their weights, and what is kept.

Recall queries the full-text indexes with terms of the window and keeps only
strong, new matches, facts before chatter:

1. Terms come from the newest `WINDOW_MESSAGES` messages (`terms`: latin
   stems matched as a word's start, CJK 2-grams), less those only the
   message's stock phrases hold: a clause said `phrases.STOCK_SAID` times
   before (`phrases.window_phrases`, counted as the index counts a word).
2. A term weighs its recency (per message of age, as the window is read:
   `reading`, an owner's question or chatter; less in the companion's
   words) times its rarity, log(N / df), counted outside the window: a
   term only the window holds (df 0), or in more documents than
   `df_cap`, weighs nothing, nor one made where two stock phrases meet
   (`stock_joints`). Each index is queried with the best `TERMS` terms
   within `QUERY_ROWS` rows (`best`), for the `CANDIDATES` rows holding
   the most weight of them (`backthink.memory.pipeline` runs these steps
   over what a store gives).
3. `rank` scores a candidate against each window message by what they share,
   a run of shared words counting about once (`phrases.runs_weight`),
   times the message's recency, and gates it on one
   message (`strong`): two terms, or one rare or long latin word. Its
   salience (`salience`) raises a text that shows numbers and names; `rerank`
   lowers one whose matched clauses are said elsewhere too (a repeated line).
4. The neighbours of the best matched messages come along as their context
   (`context.with_neighbours`).
5. What repeats the window or a kept item is dropped, and what scores under
   the `reading`'s share of the best; the rest fills `max_chars` (`fill`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

from backthink.memory import phrases, reading, salience
from backthink.memory.context import NEIGHBOUR_SHARE as NEIGHBOUR_SHARE
from backthink.memory.context import NEIGHBOURS as NEIGHBOURS
from backthink.memory.context import Candidate as Candidate
from backthink.memory.context import Scored as Scored
from backthink.memory.context import anchors as anchors
from backthink.memory.context import best_first
from backthink.memory.context import shared as shared
from backthink.memory.context import with_neighbours as with_neighbours
from backthink.memory.terms import (
    cjk_grams,
    held,
    is_word,
    named,
    shingles,
    similarity,
    stems,
)
from backthink.models import Message, Recalled

WINDOW_MESSAGES = 20
"""How many of the newest window messages the terms come from: a topic may be ten messages back."""
RECENCY_DECAY = reading.CHAT.decay
"""A term's weight is multiplied by this per message of age (see `reading`)."""
COMPANION = 0.7
"""A term the companion said (and the owner not) weighs this much of the owner's."""
TERMS = 32
"""How many terms a recall queries with at most..."""
QUERY_SHARE = 0.1
"""...leaving out those weighing less than this share of the heaviest (older than a question)..."""
QUERY_ROWS = 8000
"""...while their document counts add up to no more than this many rows an index reads."""
DF_CAP = 1000
"""Terms in more documents than this match too much to tell anything apart (and cost most)."""
DF_SHARE = 100
"""Nor does a term in more than one document in this many, in a history of any size..."""
DF_FLOOR = 20
"""...unless it is in this many documents or fewer: a young history's names are not common."""
CANDIDATES = 80
"""Rows read per index before the re-ranking."""
LONG_WORD_CHARS = 6
"""One matched latin word this long is enough on its own to recall a row."""
RARE_SHARE = 20
"""One matched latin word in at most one document in this many is enough on its own..."""
RARE_FLOOR = 3
"""...as is one in this many documents or fewer, in a history of any size..."""
RARE_CHARS = 4
"""...if it is this long at least (a shorter word is often part of a longer one), or a name."""
TYPICAL_CHARS = 100
"""The length at which a row's score is neither raised nor lowered."""
SIMILAR = 0.5
"""Trigram Jaccard similarity at which two texts count as the same thing said twice."""
ITEM_CHARS = 600
"""One recalled text is cut past this many characters."""
RECHECKED = 16
"""The best candidates whose matched clauses are counted (`repeats_asked`), the rest dropped."""


def recency(window: Sequence[Message], stock: Collection[str] = ()) -> dict[str, float]:
    """Each usable term of the window with its recency weight (1.0 at most, for the newest).

    A term weighs `RECENCY_DECAY` per message of age, `COMPANION` of that
    in the companion's messages, the most of the messages that say it. A
    term that only `stock` phrases of a message hold comes not from it.
    """
    weights: dict[str, float] = {}
    for weight, terms in _said(window, stock):
        for term in terms:
            if weights.get(term, 0.0) < weight:
                weights[term] = weight
    return weights


def _said(window: Sequence[Message], stock: Collection[str]) -> list[tuple[float, frozenset[str]]]:
    """Each window message's weight and its terms out of stock phrases, the newest first.

    A message weighs its `reading`'s decay per message of age: the owner's
    question far more than what came before it, chatter nearly the same
    whatever its age (the topic may be ten messages back).
    """
    newest = list(window)[-WINDOW_MESSAGES:]
    decay = reading.reading(window, stock).decay
    said: list[tuple[float, frozenset[str]]] = []
    for age, message in enumerate(reversed(newest)):
        weight = decay**age * (COMPANION if message.role == "assistant" else 1.0)
        said.append((weight, phrases.fresh_terms(message.text, stock)))
    return said


def window_texts(window: Sequence[Message]) -> list[str]:
    """The texts of the window messages the terms come from."""
    return [m.text for m in list(window)[-WINDOW_MESSAGES:]]


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
    rarer than either phrase; a usable one whose two characters both lie
    inside stock 2-grams (the one before it and the one after) is taken for
    such a joint, unless the window says it elsewhere too.
    """
    joints: set[str] = set()
    clean: set[str] = set()
    usable = {t for t, n in df.items() if 0 < n <= cap and not is_word(t)}
    for text in window_texts(window):
        for grams in cjk_grams(text):
            for i, gram in enumerate(grams):
                if gram not in usable:
                    continue
                # Its first character is covered where the 2-gram before is stock,
                # its second where the one after is.
                left = i > 0 and df.get(grams[i - 1], 0) > cap
                right = i + 1 < len(grams) and df.get(grams[i + 1], 0) > cap
                (joints if left and right else clean).add(gram)
    return frozenset(joints - clean)


def best(weights: Mapping[str, float], df: Mapping[str, int], k: int | None = None) -> list[str]:
    """The heaviest terms (of `weigh`'s, best first) that occur in one index (df > 0).

    At most `k` of them (default `TERMS`), and no more than the index reads
    `QUERY_ROWS` rows for: a common term is passed over for the rarer ones
    after it.
    """
    k = TERMS if k is None else k
    chosen: list[str] = []
    rows = 0
    heaviest = max(weights.values(), default=0.0)
    for term in weights:
        if weights[term] < heaviest * QUERY_SHARE:
            break
        count = df.get(term, 0)
        if count > 0 and rows + count <= QUERY_ROWS:
            chosen.append(term)
            rows += count
            if len(chosen) >= k:
                break
    return chosen


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


def rank(
    candidates: Iterable[Candidate],
    weights: Mapping[str, float],
    window: Sequence[Message],
    *,
    df: Mapping[str, int],
    documents: int,
    specific: Collection[str] = (),
    stock: Collection[str] = (),
) -> list[Scored]:
    """Score and gate the candidates; the best first, the newer on ties.

    A candidate is scored against each window message by the terms they
    share (of `weights`, out of the message's `stock` phrases) and passes
    the gate (`strong`) on those of one message: two unrelated messages
    sharing a term each with it do not make it a match. Terms shared in a
    row count once, as a run (`phrases.shared_runs`), at the rarity
    log(N / df) of its rarest term; the runs' sum is weighed by the
    message's recency. The best message's score, times the candidate's
    surface salience (`salience.factor`), is its score.
    """
    scored: list[Scored] = []
    seen: set[tuple[str, int]] = set()
    said = [
        (weight, [t for t in terms if t in weights], stems_of)
        for (weight, terms), stems_of in zip(
            _said(window, stock), [stems(t) for t in reversed(window_texts(window))], strict=True
        )
    ]
    saying: dict[str, list[int]] = {}  # which window messages say each term
    for i, (_, terms, _) in enumerate(said):
        for term in terms:
            saying.setdefault(term, []).append(i)
    how = reading.reading(window, stock)
    top = (df_cap(documents) + 1) if how.rarity_from_cap else (documents + 1)
    rarity = {t: math.log(top / max(df.get(t, 1), 1)) for t in weights}
    for candidate in candidates:
        if (candidate.kind, candidate.id) in seen:
            continue
        seen.add((candidate.kind, candidate.id))
        matched = held(candidate.text) & saying.keys()
        if not matched:
            continue
        alone = {
            t
            for t in matched
            if t in specific and (len(t) >= RARE_CHARS or named(candidate.text, t))
        }
        score = 0.0
        for i in sorted({i for t in matched for i in saying[t]}):
            weight, terms, own = said[i]
            shared = [t for t in terms if t in matched]
            if strong(shared, alone):
                runs = phrases.shared_runs(own, stems(candidate.text))
                score = max(score, weight * phrases.runs_weight(runs, shared, rarity))
        if score > 0:
            score /= 1 - how.length_norm + how.length_norm * len(candidate.text) / TYPICAL_CHARS
            if how.surface:
                score *= salience.factor(candidate.text)
            scored.append((score, candidate))
    scored.sort(key=best_first)
    return scored


def repeats_asked(scored: Sequence[Scored], weights: Collection[str]) -> list[str]:
    """The clauses of the `RECHECKED` best candidates that matched the window: to count."""
    return phrases.asked((c.text for _, c in scored[:RECHECKED]), weights)


def rerank(
    scored: Sequence[Scored], weights: Collection[str], phrase_df: Mapping[str, int]
) -> list[Scored]:
    """The `RECHECKED` best candidates, a repeated line lowered; the best first.

    `phrase_df` counts each clause of `repeats_asked` in every row, the
    candidate's own included.
    """
    rescored = [
        (score * salience.repeat_factor(phrases.unique_share(c.text, weights, phrase_df)), c)
        for score, c in scored[:RECHECKED]
    ]
    rescored.sort(key=best_first)
    return rescored


def stock(df: Mapping[str, int], documents: int) -> frozenset[str]:
    """The terms in more than `df_cap` documents (the window's too): stock phrases, common words."""
    cap = df_cap(documents)
    return frozenset(term for term, count in df.items() if count > cap)


def fill(
    scored: Iterable[Scored],
    window: Sequence[Message],
    *,
    limit: int,
    max_chars: int,
    stock: Collection[str] = (),
) -> list[Recalled]:
    """De-duplicate and bound the scored candidates, the best first.

    Only those scoring the `reading`'s keep share of the best or more are
    kept (`stock`: the window's stock phrases, as `rank` had them): in
    chatter, what falls far behind the best shares words with the window by
    chance (an owner's question lets the budget decide).
    A candidate near-identical to a window message or to a better one
    already kept is dropped; texts are cut at `ITEM_CHARS` and the kept
    texts together stay within `max_chars` (one that no longer fits is
    passed over for a shorter one after it), at most `limit` of them.
    """
    shown = [shingles(message.text) for message in window]
    share = reading.reading(window, stock).keep_share
    kept: list[Recalled] = []
    used = 0
    floor = 0.0
    for score, candidate in scored:
        if len(kept) >= limit or score < floor:
            break
        own = shingles(candidate.text)
        if any(similarity(own, other) >= SIMILAR for other in shown):
            continue
        text = _cut(candidate.text, min(ITEM_CHARS, max_chars))
        if used + len(text) > max_chars:
            continue
        shown.append(own)
        used += len(text)
        floor = max(floor, score * share)
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
