"""Phrases: what a window says in stock phrases, and what it shares with a recalled text in runs.

Words are not the only unit a chat repeats. An owner's verbal tics and stock
lines (「今天也是努力活着的一天」, "living the dream obviously") are whole
clauses said again and again, and a line of chatter is often made of the
same pieces as many others. Three measures read them, all by the words
index's own tokens (`backthink.memory.terms.clauses`), so a store counts a
phrase as it counts a word:

- a window clause said `STOCK_SAID` times or more before is a stock phrase
  (`window_phrases`, `stock`): its words are no query, however rare each is
  on its own;
- the words a window message shares with a candidate in a row count about
  once, as one unit (`shared_runs`, `runs_weight`): a run of seven 2-grams
  of one stock phrase is one match, not seven;
- a candidate whose matched clauses are said elsewhere too is a repeated
  line, not a fact (`asked`, `unique_share`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from backthink.memory.terms import cached_terms, clauses, is_word

STOCK_SAID = 2
"""A window clause said this many times before the window is a stock phrase."""
PHRASE_TOKENS = 3
"""A clause shorter than this many tokens is a word or two, not a phrase: never stock."""

RUN_WORDS = 0.5
"""In a run of latin words, each word past the rarest counts this much (CJK 2-grams: nothing).

Two rare words said in a row (welding class) are more than one; the
2-grams of one CJK run overlap and tell no more than its rarest does."""

Run = tuple[str, ...]
"""Tokens (stems, CJK 2-grams) two texts hold in the same order, one after the other."""


def phrase_terms(phrase: str) -> tuple[str, ...]:
    """The recall terms of a phrase (its latin stems and CJK 2-grams)."""
    return cached_terms(phrase)


def window_phrases(texts: Iterable[str], df: Mapping[str, int], cap: int) -> list[str]:
    """The window's clauses worth counting: long enough, and holding a usable term.

    A clause none of whose terms is in 1 to `cap` documents is left out: it
    weighs nothing either way, and counting a phrase of common words only
    costs the index a walk through every row that holds them.
    """
    usable = {t for t, n in df.items() if 0 < n <= cap}
    found: dict[str, None] = {}
    for text in texts:
        for phrase in clauses(text):
            if phrase.count(" ") + 1 >= PHRASE_TOKENS and not usable.isdisjoint(
                phrase_terms(phrase)
            ):
                found[phrase] = None
    return list(found)


def stock(phrase_df: Mapping[str, int]) -> frozenset[str]:
    """The counted window clauses said `STOCK_SAID` times or more outside the window."""
    return frozenset(p for p, n in phrase_df.items() if n >= STOCK_SAID)


def fresh_terms(text: str, stock_phrases: Collection[str]) -> frozenset[str]:
    """A window message's terms less those only its stock clauses hold."""
    every = cached_terms(text)
    if not stock_phrases:
        return frozenset(every)
    said = [p for p in clauses(text) if p not in stock_phrases]
    stocked = {t for p in clauses(text) if p in stock_phrases for t in phrase_terms(p)}
    kept = {t for p in said for t in phrase_terms(p)}
    return frozenset(t for t in every if t not in stocked or t in kept)


def shared_runs(said: Sequence[str], other: Sequence[str]) -> list[Run]:
    """The longest runs of `said`'s tokens that `other` holds in the same order, left to right.

    Both are token sequences (`backthink.memory.terms.stems`). A token
    `other` lacks starts no run; a run grows while `other` holds it whole.
    """
    held = set(other)
    line = " " + " ".join(other) + " "
    runs: list[Run] = []
    i = 0
    while i < len(said):
        if said[i] not in held:
            i += 1
            continue
        j = i + 1
        while j < len(said) and said[j] in held and f" {' '.join(said[i : j + 1])} " in line:
            j += 1
        runs.append(tuple(said[i:j]))
        i = j
    return runs


def runs_weight(runs: Sequence[Run], shared: Collection[str], rarity: Mapping[str, float]) -> float:
    """The summed rarity of the `shared` terms, each run of them counting about once.

    A run counts at its rarest term's rarity, plus `RUN_WORDS` of the
    others' when they are latin words. A shared term in no run (a latin stem
    found as a prefix: paint in painter) counts alone.
    """
    left = set(shared)
    total = 0.0
    for run in runs:
        values = [rarity[t] for t in run if t in left]
        if values:
            rest = RUN_WORDS if is_word(run[0]) else 0.0
            total += max(values) + rest * (sum(values) - max(values))
            left.difference_update(run)
    return total + sum(rarity[t] for t in left)


def asked(texts: Iterable[str], usable: Collection[str]) -> list[str]:
    """The clauses of recalled texts that hold a usable term: those `unique_share` asks about."""
    found: dict[str, None] = {}
    for text in texts:
        for phrase in clauses(text):
            if phrase.count(" ") and any(t in usable for t in phrase_terms(phrase)):
                found[phrase] = None
    return list(found)


def unique_share(text: str, usable: Collection[str], phrase_df: Mapping[str, int]) -> float:
    """The share of a text's clauses holding a usable term that no other row says (1.0: none).

    A clause's count includes the text itself: said elsewhere means in two
    rows or more. A clause not counted (one token, or none asked) is unique.
    """
    matched = [
        p for p in clauses(text) if p.count(" ") and any(t in usable for t in phrase_terms(p))
    ]
    if not matched:
        return 1.0
    return sum(1 for p in matched if phrase_df.get(p, 1) <= 1) / len(matched)
