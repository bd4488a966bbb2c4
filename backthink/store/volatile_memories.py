"""VolatileMemoryStore: long-term memories in a dict, with the same recall as the SQL stores.

Search and recall scan where the SQL stores read their indexes, and match
as those indexes would, so tests and benchmarks see the same terms, gates
and neighbours without a database.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from datetime import UTC

from pydantic import ValidationError

from backthink.errors import StoreError
from backthink.memory import phrases, recall
from backthink.memory.recall import Candidate
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
        recent = recall.recency(window)
        ids = [m.id for m in window if m.id is not None]
        before = before_message_id if before_message_id is not None else min(ids, default=None)
        if not recent or limit <= 0 or max_chars <= 0:
            return []
        every_message = [
            m
            for session in (self._messages._sessions if self._messages else {}).values()
            for m in session
        ]
        window_ids = set(ids)
        older = [m for m in every_message if m.id not in window_ids]
        memories = builtins.list(self._rows.values())

        def outside(terms: Collection[str]) -> tuple[dict[str, int], dict[str, int]]:
            on_memories = {t: sum(recall.indexed(m.text, t) for m in memories) for t in terms}
            return on_memories, {t: sum(recall.indexed(m.text, t) for m in older) for t in terms}

        df_memory, df_message = outside(recent)
        df = {t: df_memory[t] + df_message[t] for t in recent}
        documents = self._max_id + (self._messages._max_id if self._messages else 0) - len(window)
        asked = phrases.window_phrases(recall.window_texts(window), df, recall.df_cap(documents))
        stock = phrases.stock(_sum(*outside(asked)))
        if stock:
            recent = recall.recency(window, stock)
        weights = recall.weigh(recent, df, documents, window)
        # As the SQL store does: each side queried by its own best terms.
        queried = set(recall.best(weights, df_memory)) | set(recall.best(weights, df_message))
        found = [
            recall.Candidate("memory", m.id or 0, m.text, m.created_at, m.kind)
            for m in memories
            if m.owner_id == owner_id
            and m.id not in exclude
            and any(recall.contains(m.text, t) for t in queried)
        ]
        found += [
            recall.Candidate(
                "message", m.id or 0, m.text, m.created_at, role=m.role, origin=m.origin
            )
            for m in every_message
            if m.owner_id == owner_id
            and m.session_id == MAIN_SESSION
            and not m.undelivered
            and before is not None
            and (m.id or 0) < before
            and any(recall.contains(m.text, t) for t in queried)
        ]
        scored = recall.rank(
            found, weights, window, df=df, documents=documents,
            specific=recall.rare(df, documents), stock=stock,
        )  # fmt: skip
        scored = recall.rerank(
            scored, weights, _sum(*outside(recall.repeats_asked(scored, weights)))
        )
        if before is not None:
            near = self._neighbours(owner_id, recall.anchors(scored), before)
            shared = recall.shared(scored, near)
            texts = [m.text for m in memories] + [m.text for m in every_message]
            counted = {t: sum(recall.indexed(x, t) for x in texts) for t in shared}
            scored = recall.with_neighbours(scored, near, recall.stock(counted, documents))
        return recall.fill(scored, window, limit=limit, max_chars=max_chars, stock=stock)

    def _neighbours(
        self, owner_id: str, anchors: Sequence[int], before: int
    ) -> dict[int, builtins.list[Candidate]]:
        """As `neighbours.neighbours`: the messages beside each anchor, below id `before`."""
        sessions = self._messages._sessions if self._messages else {}
        session = sessions.get((owner_id, MAIN_SESSION), [])
        shown = [m for m in session if not m.undelivered and (m.id or 0) < before]
        at = {m.id: i for i, m in enumerate(shown)}
        found: dict[int, builtins.list[Candidate]] = {}
        for anchor in anchors:
            if anchor not in at:
                continue
            i = at[anchor]
            found[anchor] = [
                Candidate("message", m.id or 0, m.text, m.created_at, role=m.role, origin=m.origin)
                for m in shown[max(i - 1, 0) : i + 2]
                if m.id != anchor
            ]
        return found


def _sum(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    return {t: n + second[t] for t, n in first.items()}
