"""How recall reads a window: answering the owner's question, or following the chat.

Two windows call for two recalls. When the owner's newest message asks
something (`asks`), recall answers it, as a search would: the question's
words weigh most by far, a word's rarity is counted over every document,
long rows are evened out and whatever may answer fills the budget
(`ANSWER`). Otherwise the window is chatter, and what it comes back to may
be ten messages back: every message weighs nearly the same, only words
rarer than common ones count, a row showing names and numbers is preferred,
and only what stands out is kept (`CHAT`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from backthink.memory.phrases import fresh_terms
from backthink.models import Message

ASKING_TERMS = 2
"""A question with fewer terms than this asks about nothing in particular."""


@dataclass(frozen=True)
class Reading:
    """The settings of one way of reading a window."""

    decay: float
    """A window message's weight is multiplied by this per message of age."""
    rarity_from_cap: bool
    """A term's rarity is log(cap / df), up from the document cap (else log(N / df))."""
    length_norm: float
    """How much a row's length divides its score (0: not at all), as BM25's b does."""
    surface: bool
    """Whether a row showing numbers and names is raised (`salience.factor`)."""
    keep_share: float
    """A kept item scores at least this share of the best one's (0: the budget decides)."""


ANSWER = Reading(decay=0.3, rarity_from_cap=False, length_norm=0.3, surface=False, keep_share=0.0)
"""The owner asked: the question's words first, what may answer fills the budget."""
CHAT = Reading(decay=0.97, rarity_from_cap=True, length_norm=0.0, surface=True, keep_share=0.6)
"""Chatter: the whole window's words, facts before chatter, only what stands out.

A fact is often said in passing, inside a long message: no length norm. A
word at the document cap tells nothing apart, so rarity counts up from it
(in a young history log(N / df) makes a common word weigh nearly as much as
a rare one). What scores under 0.6 of the best shares words with the
window by chance."""


def asks(window: Sequence[Message], stock: Collection[str] = ()) -> bool:
    """Whether the owner's newest message asks about something.

    A question mark, and `ASKING_TERMS` terms out of `stock` phrases: a
    stock question (你觉得呢？, what's the plan?) asks about nothing.
    """
    if not window or window[-1].role != "user":
        return False
    text = window[-1].text
    return ("?" in text or "？" in text) and len(fresh_terms(text, stock)) >= ASKING_TERMS


def reading(window: Sequence[Message], stock: Collection[str] = ()) -> Reading:
    """`ANSWER` when the owner's newest message asks something (`asks`), else `CHAT`."""
    return ANSWER if asks(window, stock) else CHAT
