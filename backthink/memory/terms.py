"""Recall's terms: the words of a text as recall queries, weighs and matches them.

A term is the stem of a latin word (letters and digits) of at least
`MIN_WORD_CHARS` that is no function word (`STOPWORDS`), matched where a
word of a text begins with it, or a CJK 2-gram, matched anywhere. The
words index (`index_text`, see `backthink.store.fulltext`) holds exactly
these. A phrase (`phrase`: index tokens joined by spaces, a clause of a
text) is a term too: the index finds it where its tokens stand one after
the other, and so does `holds`. Raw text is never handed to MATCH: each
term is quoted. Terms, tokens and shingles of a text are memoised: a
round's window repeats most of the previous round's messages.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from functools import lru_cache

MIN_WORD_CHARS = 3
"""A latin word shorter than this is no term (the trigram index finds nothing shorter)."""
SCAN_CHARS = 1000
"""Characters of a text its tokens, clauses and held terms are read in: a recalled item shows
600, and a memoised long text would cost the daemon's memory (a phrase past them is not seen)."""
PREFIX_CHARS = 24
"""The longest start of a word `held` keeps: a token past it (a hash, a URL) is no stem."""
MEMO_TEXTS = 256
"""Texts whose terms and shingles are memoised: a round's window and candidates.

Bounded for the daemon's memory: a text's terms and shingles take some 7 KiB,
so the two memos hold at most about 2 MiB."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
CJK_RUN = re.compile(f"[{_CJK}]+")
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
    today tomorrow yesterday
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
    return list(cached_terms(text))


@lru_cache(maxsize=MEMO_TEXTS)
def cached_terms(text: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for run in CJK_RUN.findall(text):
        for i in range(len(run) - 1):
            found[run[i : i + 2]] = None
    for word in _WORD.findall(text):
        low = word.lower()
        if len(low) >= MIN_WORD_CHARS and low not in STOPWORDS:
            found[stem(low)] = None
    return tuple(found)


def is_word(term: str) -> bool:
    """Whether a term is a latin word (not a CJK 2-gram, nor a phrase)."""
    return CJK_RUN.search(term) is None and " " not in term


def is_phrase(term: str) -> bool:
    """Whether a term is a phrase: several index tokens, found one after the other."""
    return " " in term


@lru_cache(maxsize=MEMO_TEXTS)
def tokens(text: str) -> tuple[str, ...]:
    """The words index's tokens of a text, lowercased: latin words whole, CJK runs as 2-grams."""
    return tuple(index_text(text[:SCAN_CHARS]).lower().split())


@lru_cache(maxsize=MEMO_TEXTS)
def stems(text: str) -> tuple[str, ...]:
    """`tokens`, each latin word cut to its stem (`stem`): two texts compared word by word."""
    return tuple(stem(t) if is_word(t) else t for t in tokens(text))


_INSIDE_A_WORD = " \t'’-"
"""What may stand between two words of one clause: spaces, and what joins a word (it's, e-mail)."""


@lru_cache(maxsize=MEMO_TEXTS)
def clauses(text: str) -> tuple[str, ...]:
    """The clauses of a text as phrases: its runs of tokens between punctuation, one script each.

    A clause ends where anything but spaces (or an apostrophe, a hyphen)
    stands between two words (a comma, a full stop, an emoji), and where
    latin words meet CJK ones: the words index of PostgreSQL keeps the two
    apart, so no phrase spans both.
    """
    found: list[str] = []
    run: list[str] = []
    last_end = 0
    last_cjk: bool | None = None
    for match in _TOKEN.finditer(text[:SCAN_CHARS]):
        cjk = CJK_RUN.match(match.group()) is not None
        gap = text[last_end : match.start()]
        if run and (gap.strip(_INSIDE_A_WORD) or cjk != last_cjk):
            found.append(" ".join(run))
            run = []
        word = match.group().lower()
        run += [word[i : i + 2] for i in range(len(word) - 1)] if cjk else [word]
        last_end, last_cjk = match.end(), cjk
    if run:
        found.append(" ".join(run))
    return tuple(found)


def index_text(text: str) -> str:
    """What the words index holds of a text: its latin words, and its CJK runs as 2-grams.

    Tokens are separated by spaces, so the index's own tokenizer (unicode61,
    which folds case) reads each as one: a CJK 2-gram is matched whole, a
    latin stem as the prefix of a word.
    """
    tokens: list[str] = []
    for run in _TOKEN.findall(text):
        if CJK_RUN.match(run):
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
    """One term's MATCH expression on the words index (see `words_query`).

    A phrase is one quoted string: FTS5 splits it into its tokens and finds
    them one after the other.
    """
    return quote(term) + ("*" if is_word(term) else "")


def inside(texts: Iterable[str], terms: Collection[str]) -> Counter[str]:
    """How many of the texts hold each term (the terms no text holds are absent)."""
    counts: Counter[str] = Counter()
    wanted = frozenset(terms)
    phrases = [t for t in wanted if is_phrase(t)]
    for text in texts:
        counts.update(held(text) & wanted)
        if phrases:
            low = text.lower()
            counts.update(p for p in phrases if holds(low, p))
    return counts


@lru_cache(maxsize=MEMO_TEXTS)
def cjk_grams(text: str) -> tuple[tuple[str, ...], ...]:
    """The 2-grams of each CJK run of a text, run by run."""
    return tuple(
        tuple(run[i : i + 2] for i in range(len(run) - 1))
        for run in CJK_RUN.findall(text[:SCAN_CHARS])
    )


@lru_cache(maxsize=MEMO_TEXTS)
def held(text: str) -> frozenset[str]:
    """Every word or 2-gram term a text holds (`holds`), phrases aside, as one set.

    Its CJK 2-grams, and every start of each latin word: a stem is held where
    a word begins with it. One set intersection then matches many terms.
    """
    head = text[:SCAN_CHARS]
    found = {t for t in cached_terms(head) if not is_word(t)}
    for word in _WORD.findall(head.lower()):
        # A stem longer than PREFIX_CHARS is held only as the whole word.
        found.update(word[:i] for i in range(1, min(len(word), PREFIX_CHARS) + 1))
        found.add(word)
    return frozenset(found)


def indexed(text: str, term: str) -> bool:
    """Whether the words index finds a term in a text: as `contains` (it counts documents so)."""
    return contains(text, term)


def contains(text: str, term: str) -> bool:
    """Whether a text holds a term: a CJK term anywhere, a latin stem at a word's start."""
    return holds(text.lower(), term)


def count_holding(texts: Sequence[str], terms: Collection[str]) -> dict[str, int]:
    """How many of `texts` hold each term, as `contains` decides, each text lowered once.

    The in-memory store counts this way: a text is lowered (and, for phrases,
    laid out as its tokens) once per count, not once per term.
    """
    lows = [text.lower() for text in texts]
    rows = [_in_a_row(low) for low in lows] if any(is_phrase(t) for t in terms) else []
    found: dict[str, int] = {}
    for term in terms:
        if is_phrase(term):
            needle = f" {term} "
            found[term] = sum(needle in row for row in rows)
        else:
            found[term] = sum(holds(low, term) for low in lows)
    return found


def holds(low: str, term: str) -> bool:
    """Whether a lowercased text holds a term (see `contains`); a phrase as its tokens in a row."""
    if is_phrase(term):
        return f" {term} " in _in_a_row(low)
    at = low.find(term)
    if at < 0 or not is_word(term):
        return at >= 0
    while at >= 0:
        if at == 0 or not _WORD_CHAR.match(low[at - 1]):
            return True
        at = low.find(term, at + 1)
    return False


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


@lru_cache(maxsize=MEMO_TEXTS)
def _in_a_row(low: str) -> str:
    return " " + " ".join(tokens(low)) + " "


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
