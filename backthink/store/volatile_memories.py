"""VolatileMemoryStore: long-term memories in a dict, with the same recall as the SQL stores.

Search and recall scan where the SQL stores read their indexes, and match
as those indexes would. Recall runs the one pipeline (`backthink.memory.pipeline`)
over `VolatileSource`, so tests and benchmarks recall what a database would.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC

from pydantic import ValidationError

from backthink.errors import StoreError
from backthink.memory import pipeline
from backthink.memory.pipeline import Documents, Side
from backthink.memory.scoring import Candidate
from backthink.memory.terms import contains, count_holding
from backthink.models import MAIN_SESSION, Memory, MemoryKind, Message, Recalled
from backthink.store.failures import describe
from backthink.store.volatile import VolatileMessageStore, check_limit


class VolatileMemoryStore:
    """A MemoryStore in a dict; search and recall scan, as the indexes would match.

    Recall reads older messages from `messages`, the in-memory message store
    of the same app (None: memories only).
    """

    def __init__(self, messages: VolatileMessageStore | None = None) -> None:
        """Start empty."""
        self._messages = messages
        self._rows: dict[int, Memory] = {}
        self._max_id = 0

    async def add(self, memory: Memory) -> Memory:
        """Store one memory and return it with its id; a taken id is a StoreError."""
        try:
            checked = Memory.model_validate(dict(memory))
        except ValidationError as exc:
            raise StoreError(f"could not store memory: {describe(exc)}") from None
        new_id = checked.id if checked.id is not None else self._max_id + 1
        if new_id in self._rows:
            raise StoreError(f"could not store memory: memory id {new_id} is taken")
        stored = checked.model_copy(
            update={"id": new_id, "created_at": checked.created_at.astimezone(UTC)}
        )
        self._rows[new_id] = stored
        self._max_id = max(self._max_id, new_id)
        return stored

    def _newest_first(self, owner_id: str) -> builtins.list[Memory]:
        rows = [m for m in self._rows.values() if m.owner_id == owner_id]
        rows.sort(key=lambda m: (m.created_at, m.id or 0), reverse=True)
        return rows

    async def list(
        self, owner_id: str, *, kind: MemoryKind | None = None, limit: int = 20
    ) -> builtins.list[Memory]:
        """Return an owner's memories newest first, of one kind or of every kind."""
        check_limit(limit)
        rows = [m for m in self._newest_first(owner_id) if kind is None or m.kind is kind]
        return rows[:limit]

    async def latest_thoughts(self, owner_id: str, n: int) -> builtins.list[Memory]:
        """Return an owner's newest `n` thoughts, newest first."""
        return await self.list(owner_id, kind=MemoryKind.THOUGHT, limit=n)

    async def get_many(self, owner_id: str, ids: Collection[int]) -> builtins.list[Memory]:
        """Return an owner's memories with these ids, newest first."""
        wanted = set(ids)
        return [m for m in self._newest_first(owner_id) if m.id in wanted]

    async def forget(self, owner_id: str, memory_id: int) -> bool:
        """Delete one memory of an owner; False if there is none."""
        found = self._rows.get(memory_id)
        if found is None or found.owner_id != owner_id:
            return False
        del self._rows[memory_id]
        return True

    async def search(self, owner_id: str, query: str, *, limit: int = 20) -> builtins.list[Memory]:
        """Return an owner's memories that hold every word of `query`, newest first."""
        words = query.replace("\0", " ").lower().split()
        if not words:
            return []
        found = [m for m in self._newest_first(owner_id) if all(w in m.text.lower() for w in words)]
        return found[:limit]

    async def recall(
        self,
        owner_id: str,
        window: Sequence[Message],
        *,
        limit: int,
        max_chars: int,
        before_message_id: int | None = None,
        exclude: Collection[int] = (),
    ) -> builtins.list[Recalled]:
        """Return the memories and older main-session messages the window brings to mind.

        Memories whose id is in `exclude` are never recalled.
        """
        q = pipeline.query(
            owner_id,
            window,
            limit=limit,
            max_chars=max_chars,
            before_message_id=before_message_id,
            exclude=exclude,
        )
        if q is None:
            return []
        messages = builtins.list(self._messages.scan()) if self._messages else []
        return pipeline.recall(VolatileSource(builtins.list(self._rows.values()), messages), q)


def _memory(m: Memory) -> Candidate:
    return Candidate("memory", m.id or 0, m.text, m.created_at, m.kind)


def _message(m: Message) -> Candidate:
    return Candidate("message", m.id or 0, m.text, m.created_at, role=m.role, origin=m.origin)


class VolatileSource:
    """A `RecallSource` that scans the rows, matching as the words indexes do (`contains`)."""

    def __init__(self, memories: Sequence[Memory], messages: Sequence[Message]) -> None:
        """Scan these memories and messages (every owner's; each session's messages in order)."""
        self._memories = memories
        self._messages = messages

    def documents(self) -> Documents:
        """The highest id of each side (see `RecallSource.documents`)."""
        return Documents(
            max((m.id or 0 for m in self._memories), default=0),
            max((m.id or 0 for m in self._messages), default=0),
        )

    def counts(self, side: Side, terms: Collection[str]) -> Mapping[str, int]:
        """Rows of a side holding each term (see `RecallSource.counts`)."""
        texts = [r.text for r in (self._memories if side == "memory" else self._messages)]
        return count_holding(texts, terms)

    def _shown(self, owner_id: str, before: int | None) -> builtins.list[Message]:
        """The owner's delivered main-session messages below id `before`, in order."""
        if before is None:
            return []
        return [
            m
            for m in self._messages
            if m.owner_id == owner_id
            and m.session_id == MAIN_SESSION
            and not m.undelivered
            and not m.superseded
            and (m.id or 0) < before
        ]

    def _visible(self, side: Side, owner_id: str, before: int | None) -> builtins.list[Candidate]:
        if side == "memory":
            return [_memory(m) for m in self._memories if m.owner_id == owner_id]
        return [_message(m) for m in self._shown(owner_id, before)]

    def hits(
        self, side: Side, terms: Sequence[str], *, owner_id: str, before: int | None
    ) -> Iterable[tuple[int, int]]:
        """Each term's rows among the owner's (see `RecallSource.hits`)."""
        return [
            (i, row.id)
            for row in self._visible(side, owner_id, before)
            for i, term in enumerate(terms)
            if contains(row.text, term)
        ]

    def rows(
        self, side: Side, ids: Sequence[int], *, owner_id: str, before: int | None
    ) -> Iterable[Candidate]:
        """The owner's rows among `ids` (see `RecallSource.rows`)."""
        wanted = set(ids)
        return [c for c in self._visible(side, owner_id, before) if c.id in wanted]

    def neighbours(
        self, anchors: Sequence[int], *, owner_id: str, before: int
    ) -> Mapping[int, Sequence[Candidate]]:
        """The messages beside each anchor in its session (see `RecallSource.neighbours`)."""
        shown = self._shown(owner_id, before)
        at = {m.id: i for i, m in enumerate(shown)}
        found: dict[int, builtins.list[Candidate]] = {}
        for anchor in anchors:
            if anchor in at:
                i = at[anchor]
                beside = shown[max(i - 1, 0) : i + 2]
                found[anchor] = [_message(m) for m in beside if m.id != anchor]
        return found
