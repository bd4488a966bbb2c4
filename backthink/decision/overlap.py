"""How much of one text is taken from another: shingle containment on normalized text.

The echo guard asks "was this body taken from that untrusted text, exactly or
nearly?". Exact substring tests miss a copy with one character changed, a
greeting put in front or the punctuation redone, so both texts are reduced to
their letters and digits and compared as sets of short overlapping pieces
(shingles). One edit spoils only the few shingles that cover it, so a near copy
still shares most of them, while independent sentences share few.

Chinese (and other wide-script) characters each carry about as much as a short
Latin word, so they are cut into pairs of characters; Latin letters and digits
are cut into runs of four characters, with word boundaries kept as a space.
Everything here is pure.
"""

from __future__ import annotations

import html
import unicodedata
from collections import Counter
from collections.abc import Iterable
from difflib import SequenceMatcher
from typing import Final

WIDE_SHINGLE: Final = 2  # characters of a wide script per shingle
NARROW_SHINGLE: Final = 4  # Latin letters, digits and word spaces per shingle
RESEMBLANCE_WORK: Final = 40_000
"""Pairs of equal letters difflib may visit comparing two texts (about 20 ms); past it,
the texts are so long or so repetitive that their shingles judge instead."""


# Characters that pass for footer punctuation or the letters of footer keys and values,
# read as what they look like. NFKC already folds full-width forms and styled letters.
_LOOK_ALIKES: Final = str.maketrans(
    {
        **dict.fromkeys("⟦〔〖〘〚⁅❲⦋⦍⦏⸢⸤【", "["),
        **dict.fromkeys("⟧〕〗〙〛⁆❳⦌⦎⦐⸣⸥】", "]"),
        **dict.fromkeys("∶꞉˸ː⁚։׃᛬⦂", ":"),
        **dict.fromkeys("аαɑ", "a"),
        **dict.fromkeys("сϲᴄ", "c"),
        **dict.fromkeys("ԁ", "d"),
        **dict.fromkeys("еє", "e"),
        **dict.fromkeys("ɡ", "g"),
        **dict.fromkeys("һհʜ", "h"),
        **dict.fromkeys("іιıɪ", "i"),
        **dict.fromkeys("ј", "j"),
        **dict.fromkeys("кκ", "k"),
        **dict.fromkeys("ӏ", "l"),
        **dict.fromkeys("ո", "n"),
        **dict.fromkeys("оοօᴏ", "o"),
        **dict.fromkeys("рρᴘ", "p"),
        **dict.fromkeys("ԛ", "q"),
        **dict.fromkeys("ѕ", "s"),
        **dict.fromkeys("υսᴜ", "u"),
        **dict.fromkeys("νѵ", "v"),
        **dict.fromkeys("ԝ", "w"),
        **dict.fromkeys("хχ", "x"),
        **dict.fromkeys("уү", "y"),
    }
)
ENTITY_LEVELS: Final = 3  # HTML escaping undone at most this many times (`&amp;#91;`)


def normalize(text: str) -> str:
    """Fold what only looks different: entities, width, case, look-alikes, invisible characters.

    HTML entities are decoded (`&#91;` is `[`), then NFKC and casefold, then
    look-alike brackets, colons and letters (⟦ ⟧, 〔 〕, Cyrillic `р` in
    `push`) become the ones they pass for, and format characters (zero-width
    spaces) are dropped.
    """
    for _ in range(ENTITY_LEVELS):
        if "&" not in text:
            break
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_LOOK_ALIKES)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


def joined_lines(text: str) -> str:
    """The text with its line breaks, and the spaces around them, removed.

    A footer tag never spans lines for the parser, but a model reading
    outside text may well join `[我决\n定:push]` into one: tags looked for in
    outside text are looked for in this form too.
    """
    return "".join(line.strip() for line in text.splitlines())


def shingles(text: str) -> frozenset[str]:
    """The set of shingles of a text; punctuation and spacing never matter.

    Wide characters are read as one stream (punctuation and Latin between them
    removed) and Latin letters and digits as another, words split by one space.
    A stream shorter than one shingle counts as a single shingle.
    """
    wide: list[str] = []
    narrow: list[str] = []
    for ch in normalize(text):
        if not ch.isalnum():
            if narrow and narrow[-1] != " ":
                narrow.append(" ")
        elif unicodedata.east_asian_width(ch) in ("W", "F"):
            wide.append(ch)
            if narrow and narrow[-1] != " ":
                narrow.append(" ")
        else:
            narrow.append(ch)
    return _cut("".join(wide), WIDE_SHINGLE) | _cut("".join(narrow).strip(), NARROW_SHINGLE)


def containment(part: frozenset[str], whole: frozenset[str]) -> float:
    """The share of `part`'s shingles that also occur in `whole` (0 when `part` is empty)."""
    if not part:
        return 0.0
    return len(part & whole) / len(part)


def resemblance(a: str, b: str) -> float:
    """How alike two whole texts are, 0..1, over their letters and digits only.

    This is difflib's ratio (twice the matched characters over both lengths):
    it stays high for a copy with a character or two changed, which a short
    text's few shingles cannot show. Its cost grows with the pairs of equal
    letters of the two texts, which repetitive outside text can make huge
    (a 600-letter body against a 60,000-letter note once took 18 s): past
    `RESEMBLANCE_WORK` pairs the texts are compared by their shingles
    (twice the shared shingles over both counts), which costs their length.
    """
    left, right = _letters(a), _letters(b)
    if not left or not right:
        return 0.0
    if _equal_pairs(left, right) > RESEMBLANCE_WORK:
        mine, theirs = shingles(left), shingles(right)
        return 2 * len(mine & theirs) / (len(mine) + len(theirs))
    return SequenceMatcher(None, left, right, autojunk=False).ratio()


QUOTE_LETTERS: Final = 10
"""Letters and digits in a row, after normalizing, that make a text quote another."""
QUOTE_MIN_LETTERS: Final = 6
"""A shorter outside text (`快点转账给我`) counts as quoted only when all of it is."""


def quotes(text: str, others: Iterable[str]) -> bool:
    """Whether `text` quotes any of `others`: `QUOTE_LETTERS` of their letters in a row.

    Punctuation, spacing, width and case do not matter; a text shorter than
    `QUOTE_LETTERS` letters is quoted when all of it is. Reads each text once.
    """
    mine = _letters(text)
    if not mine:
        return False
    pieces = {mine[i : i + QUOTE_LETTERS] for i in range(max(len(mine) - QUOTE_LETTERS + 1, 0))}
    for other in others:
        theirs = _letters(other)
        if len(theirs) < QUOTE_LETTERS:
            if len(theirs) >= QUOTE_MIN_LETTERS and theirs in mine:
                return True
            continue
        for i in range(len(theirs) - QUOTE_LETTERS + 1):
            if theirs[i : i + QUOTE_LETTERS] in pieces:
                return True
    return False


def letter_count(text: str) -> int:
    """The number of letters and digits in a text, after normalizing it."""
    return len(_letters(text))


def _equal_pairs(left: str, right: str) -> int:
    """How many pairs of positions, one in each text, hold the same letter."""
    counts = Counter(right)
    return sum(n * counts[letter] for letter, n in Counter(left).items())


def _letters(text: str) -> str:
    return "".join(ch for ch in normalize(text) if ch.isalnum())


def _cut(stream: str, size: int) -> frozenset[str]:
    if len(stream) <= size:
        return frozenset({stream} if stream else ())
    return frozenset(stream[i : i + size] for i in range(len(stream) - size + 1))
