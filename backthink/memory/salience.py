"""Salience: whether a recalled text states a fact worth remembering, or is everyday chatter.

A companion should bring back what the owner told it (a name, a place, a
number, a date), not the stock lines said every day. Two signs tell them
apart without knowing any language's words:

- what the text shows on its surface (`surface`): numbers, in digits or in
  CJK numerals, and names, latin words written with a capital inside a
  sentence;
- whether the clauses it matched the window by are said elsewhere too
  (`repeated`): a line the owner repeats, or that is made of the same
  pieces as many others, says nothing new; a fact is said once.

Each gives a factor the recall score is multiplied by (`factor`, `repeat_factor`).
"""

from __future__ import annotations

import re

from backthink.memory.terms import SCAN_CHARS

SURFACE = 0.75
"""How much a text with facts on its surface outweighs one without (0.75: up to 1.75 times)."""
SURFACE_ENOUGH = 2
"""Facts on the surface past which a text gains nothing more."""
REPEATED = 0.8
"""How much a text whose matched clauses are all said elsewhere too loses (0.8: four fifths)."""

_DIGITS = re.compile(r"\d+")
# Two CJK numerals in a row (十二, 六百五十, 一千三), or one before a date's unit (九月, 五号):
# a count, an amount or a date. One numeral alone is mostly a word (一起, 一下).
_CJK_NUMBER = re.compile(
    "[零〇一二两三四五六七八九十百千万亿]{2,}|[一二三四五六七八九十]{1,3}[月号日]"
)
# A latin word with a capital after a lowercase word, a digit or a comma in the same
# sentence: a name (Dmitri, Room, The Copper Owl), not a sentence's first word.
_NAME = re.compile(r"(?<=[a-z0-9,;:)] )[A-Z][a-z][\w'’-]*")


def surface(text: str) -> int:
    """How many numbers and names a text shows: digits, CJK numerals, capitalised words.

    Read in the text's first `SCAN_CHARS` characters: what a recalled item shows.
    """
    head = text[:SCAN_CHARS]
    return sum(len(pattern.findall(head)) for pattern in (_DIGITS, _CJK_NUMBER, _NAME))


def factor(text: str) -> float:
    """A recalled text's surface factor: 1 for none, up to 1 + `SURFACE` for numbers and names."""
    return 1 + SURFACE * min(surface(text), SURFACE_ENOUGH) / SURFACE_ENOUGH


def repeat_factor(unique: float) -> float:
    """The factor of a text whose matched clauses are `unique` (a share, 0 to 1) said once.

    1 when every one is said only there; 1 - `REPEATED` when all are said elsewhere too.
    """
    return 1 - REPEATED + REPEATED * unique
