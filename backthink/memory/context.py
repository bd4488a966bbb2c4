"""Recall's candidates, and the context that comes along with the best of them.

A message recalled alone is often half of an exchange: the answer without
its question, or the question without its answer. The message just before
and just after each of the `NEIGHBOURS` best matched messages comes along
(`with_neighbours`), on the same subject or answering it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from backthink.memory.terms import cached_terms
from backthink.models import MemoryKind, Origin

NEIGHBOURS = 3
"""The best matched messages whose neighbours (the message before, the one after) come along."""
NEIGHBOUR_SHARE = 0.8
"""A neighbour's score, as a share of its match's."""


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


Scored = tuple[float, Candidate]
"""A candidate that passed the gate, and its score."""


def best_first(item: Scored) -> tuple[float, float, int]:
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
    return sorted(best.values(), key=best_first)


def shared(scored: Sequence[Scored], neighbours: Mapping[int, Sequence[Candidate]]) -> set[str]:
    """The terms the best messages share with their neighbours: the ones `stock` is asked about."""
    return {
        term
        for _, candidate in scored
        if candidate.kind == "message"
        for near in neighbours.get(candidate.id, ())
        for term in _shared(candidate, near)
    }


def _shared(candidate: Candidate, near: Candidate) -> frozenset[str]:
    return frozenset(cached_terms(near.text)) & frozenset(cached_terms(candidate.text))


def _order(candidate: Candidate) -> tuple[datetime, int]:
    return (candidate.created_at, candidate.id)


def _asks(text: str) -> bool:
    return "?" in text or "？" in text
