"""Recall's pure logic: terms from the recent window, their weights, and what is kept.

Recall queries the full-text indexes with terms of the recent window and
keeps only strong, new matches:

1. Terms come from the newest `WINDOW_MESSAGES` messages: every two
   consecutive CJK characters, and the stem of every latin word (letters and
   digits) of at least `MIN_WORD_CHARS` that is no function word
   (`STOPWORDS`: pronouns, auxiliaries, question words, month and day names).
   A stem is the word less a common ending (`stem`: painting, painted and
   paints give paint) and matches where a word of the text begins with it.
   The words index (`index_text`, see `backthink.store.fulltext`) holds
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
   best `TERMS` of the terms it holds (`best`), for the `CANDIDATES` best
   rows by bm25.
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
   shares a term with the match).
5. What repeats the window, or an item already kept, is dropped (trigram
   Jaccard similarity); the rest fills `max_chars`, best first.

Terms and shingles of a text are memoised: a round's window repeats most of
the previous round's messages.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Literal

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
MIN_WORD_CHARS = 3
"""A latin word shorter than this is no term (the trigram index finds nothing shorter)."""
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
MEMO_TEXTS = 4096
"""Texts whose terms and shingles are memoised (a few rounds' windows, many times over)."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(f"[^\\W_{_CJK}]+")
_TOKEN = re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+")
_WORD_CHAR = re.compile(f"[^\\W_{_CJK}]")

STOPWORDS = frozenset(
    """
    about above after again against also among been before being below between both
    cannot could did does doing down during each else ever every few from further
    had has have having here hers herself himself how into its itself just let more
    most much myself nor not now off once only other ought our ours ourselves out over
    own same she should some such than that the their theirs them themselves then there
    these they this those through too under until upon very was were what when where
    which while who whom whose why will with would you your yours yourself yourselves
    and are but can for her him his all any may one the was who yes not get got
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday
    don doesn didn isn aren wasn weren won couldn wouldn shouldn haven hasn hadn ain
    """.split()
)
"""Latin function words: no term, however rare a history makes them."""

_SUFFIXES = ("ingly", "edly", "ings", "ing", "ied", "ies", "ed", "es", "ly", "s", "e", "y")


def stem(word: str) -> str:
    """A lowercase latin word cut to the stem its forms begin with (paint for painting).

    Light and conservative: common endings go while at least `MIN_WORD_CHARS`
    letters stay, a doubled last consonant is undoubled (running: run), and a
    word of digits stays whole. Matching is by word start, so the stem of
    hike, hiked and hiking (hik) finds each of them.
    """
    if not word.isalpha():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= MIN_WORD_CHARS:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                continue
            word = word[: -len(suffix)]
            break
    if len(word) > MIN_WORD_CHARS and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


def terms_of(text: str) -> list[str]:
    """The recall terms of a text, in order of appearance, each once.

    CJK runs give their 3-grams; other runs of letters and digits of at least
    `MIN_WORD_CHARS` give their stems, lowercased (the index folds case),
    function words (`STOPWORDS`) none.
    """
    return list(_terms(text))


@lru_cache(maxsize=MEMO_TEXTS)
def _terms(text: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for run in _CJK_RUN.findall(text):
        for i in range(len(run) - 1):
            found[run[i : i + 2]] = None
    for word in _WORD.findall(text):
        low = word.lower()
        if len(low) >= MIN_WORD_CHARS and low not in STOPWORDS:
            found[stem(low)] = None
    return tuple(found)


def is_word(term: str) -> bool:
    """Whether a term is a latin word (not a CJK 2-gram)."""
    return _CJK_RUN.search(term) is None


def index_text(text: str) -> str:
    """What the words index holds of a text: its latin words, and its CJK runs as 2-grams.

    Tokens are separated by spaces, so the index's own tokenizer (unicode61,
    which folds case) reads each as one: a CJK 2-gram is matched whole, a
    latin stem as the prefix of a word.
    """
    tokens: list[str] = []
    for run in _TOKEN.findall(text):
        if _CJK_RUN.match(run):
            tokens += [run[i : i + 2] for i in range(len(run) - 1)]
        else:
            tokens.append(run)
    return " ".join(tokens)


def trigrams(term: str) -> list[str]:
    """The index tokens a term is made of: its overlapping 3-character pieces."""
    return [term[i : i + 3] for i in range(len(term) - 2)]


def quote(term: str) -> str:
    """Quote a term as one FTS5 string, so no text is ever read as query syntax.

    A NUL would end the string early for FTS5 ("unterminated string"); it
    becomes a space, which no term holds.
    """
    return '"' + term.replace("\0", " ").replace('"', '""') + '"'


def match_query(terms: Iterable[str]) -> str:
    """An FTS5 MATCH expression that matches any of the terms."""
    return " OR ".join(quote(term) for term in terms)


def words_query(terms: Iterable[str]) -> str:
    """A MATCH expression for the words index: a CJK 2-gram whole, a latin stem as a prefix."""
    return " OR ".join(term_query(term) for term in terms)


def term_query(term: str) -> str:
    """One term's MATCH expression on the words index (see `words_query`)."""
    return quote(term) + ("*" if is_word(term) else "")


def recency(window: Sequence[Message]) -> dict[str, float]:
    """Each term of the newest window messages with its recency weight (1.0 for the newest)."""
    weights: dict[str, float] = {}
    newest = list(window)[-WINDOW_MESSAGES:]
    for age, message in enumerate(reversed(newest)):
        factor = RECENCY_DECAY**age
        for term in _terms(message.text):
            if term not in weights:  # newest first: the first weight seen is the highest
                weights[term] = factor
    return weights


def inside(texts: Iterable[str], terms: Collection[str]) -> Counter[str]:
    """How many of the texts hold each term (the terms no text holds are absent)."""
    counts: Counter[str] = Counter()
    words = [t for t in terms if is_word(t)]
    for text in texts:
        counts.update(t for t in _terms(text) if t in terms and not is_word(t))
        if words:
            low = text.lower()
            counts.update(w for w in words if holds(low, w))
    return counts


def indexed(text: str, term: str) -> bool:
    """Whether the words index finds a term in a text: as `contains` (it counts documents so)."""
    return contains(text, term)


def contains(text: str, term: str) -> bool:
    """Whether a text holds a term: a CJK term anywhere, a latin stem at a word's start."""
    return holds(text.lower(), term)


def holds(low: str, term: str) -> bool:
    """Whether a lowercased text holds a term (see `contains`)."""
    at = low.find(term)
    if at < 0 or not is_word(term):
        return at >= 0
    while at >= 0:
        if at == 0 or not _WORD_CHAR.match(low[at - 1]):
            return True
        at = low.find(term, at + 1)
    return False


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
        for run in _CJK_RUN.findall(message.text):
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


def named(text: str, term: str) -> bool:
    """Whether a text writes a latin term as a name (capitalised, past its first word) or number."""
    if term.isdigit():
        return True
    low = text.lower()
    at = low.find(term)
    while at >= 0:
        if at > 0 and not _WORD_CHAR.match(low[at - 1]) and text[at].isupper():
            before = text[:at].rstrip()
            if before and before[-1] not in ".!?。！？":
                return True
        at = low.find(term, at + 1)
    return False


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


@lru_cache(maxsize=MEMO_TEXTS)
def shingles(text: str) -> frozenset[str]:
    """The set of 3-character pieces of a text, lowercased and without spaces."""
    flat = "".join(text.lower().split())
    return frozenset(flat[i : i + 3] for i in range(max(len(flat) - 2, 1)))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two shingle sets."""
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


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
    said = [frozenset(_terms(m.text)) for m in list(window)[-WINDOW_MESSAGES:]]
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
    scored: Sequence[Scored], neighbours: Mapping[int, Sequence[Candidate]]
) -> list[Scored]:
    """The scored candidates and the neighbours of their best messages, the best first.

    A message recalled alone is often half of an exchange: the answer
    without its question, or the question without its answer. The message
    just before and just after a best match (`anchors`) come along, each at
    `NEIGHBOUR_SHARE` of its match's score (or its own, if higher), without
    passing the gate themselves: they are recalled as that match's context.
    The one after a question is its answer; any other shares a term with
    the match (it is on the same subject), so an everyday line beside a
    fact stays away.

    Args:
        scored: `rank`'s list.
        neighbours: per anchor message id, the messages beside it.
    """
    best = {(c.kind, c.id): (score, c) for score, c in scored}
    for score, candidate in scored:
        if candidate.kind != "message":
            continue
        for near in neighbours.get(candidate.id, ()):
            answers = _asks(candidate.text) and _order(near) > _order(candidate)
            if not answers and not set(_terms(near.text)) & set(_terms(candidate.text)):
                continue
            share = score * NEIGHBOUR_SHARE
            if best.get((near.kind, near.id), (0.0, near))[0] < share:
                best[(near.kind, near.id)] = (share, near)
    return sorted(best.values(), key=_best_first)


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


def select(
    candidates: Iterable[Candidate],
    weights: Mapping[str, float],
    window: Sequence[Message],
    *,
    limit: int,
    max_chars: int,
    specific: Collection[str] = (),
    neighbours: Mapping[int, Sequence[Candidate]] | None = None,
) -> list[Recalled]:
    """Score, gate, de-duplicate and bound the candidates; the best first.

    `rank`, then `with_neighbours` (given the neighbours of `anchors`), then `fill`.
    """
    scored = rank(candidates, weights, window, specific=specific)
    if neighbours:
        scored = with_neighbours(scored, neighbours)
    return fill(scored, window, limit=limit, max_chars=max_chars)
