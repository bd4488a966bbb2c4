"""The stores as whole sets: those of one open database, or in-memory ones that share one state.

An app is wired from one set, never from parts of two: the outbox writes back
into the same session the round reads, recall reads the same messages, and
a pause set through the marks is the one the next round reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from backthink.store.database import Database
from backthink.store.marks import SqlMarks, VolatileMarks
from backthink.store.memories import SqlMemoryStore
from backthink.store.messages import SqlMessageStore
from backthink.store.outbox import SqlOutbox
from backthink.store.owners import SqlOwnerStore
from backthink.store.rounds import SqlRoundStore
from backthink.store.session import SqlSession
from backthink.store.tokens import SqlTokenStore
from backthink.store.volatile import (
    VolatileMessageStore,
    VolatileOutbox,
    VolatileOwnerStore,
    VolatileRoundStore,
)
from backthink.store.volatile_memories import VolatileMemoryStore


@dataclass(frozen=True)
class SqlStores:
    """The stores of one open database; they share its engine and connections."""

    db: Database
    messages: SqlMessageStore
    rounds: SqlRoundStore
    outbox: SqlOutbox
    memories: SqlMemoryStore
    owners: SqlOwnerStore
    session: SqlSession
    tokens: SqlTokenStore
    marks: SqlMarks

    @classmethod
    def over(cls, db: Database) -> SqlStores:
        """Every store of `db`, which must already be migrated (see `open_store`)."""
        return cls(
            db,
            SqlMessageStore(db),
            SqlRoundStore(db),
            SqlOutbox(db),
            SqlMemoryStore(db),
            SqlOwnerStore(db),
            SqlSession(db),
            SqlTokenStore(db),
            SqlMarks(db),
        )


@dataclass(frozen=True)
class VolatileStores:
    """In-memory stores that share one state, as the SQL stores share a database.

    The outbox writes back into `messages` and asks `rounds` which deliveries
    are recorded; recall reads older messages from `messages`. Nothing
    outlives the process: tests, benchmarks and the evaluation's runs.
    """

    messages: VolatileMessageStore
    rounds: VolatileRoundStore
    outbox: VolatileOutbox
    memories: VolatileMemoryStore
    owners: VolatileOwnerStore
    marks: VolatileMarks

    @classmethod
    def empty(cls, messages: VolatileMessageStore | None = None) -> VolatileStores:
        """A fresh set with nothing stored; around `messages` when given (a seeded session)."""
        messages = messages if messages is not None else VolatileMessageStore()
        rounds = VolatileRoundStore()
        return cls(
            messages,
            rounds,
            VolatileOutbox(messages, rounds),
            VolatileMemoryStore(messages),
            VolatileOwnerStore(),
            VolatileMarks(),
        )


Stores: TypeAlias = SqlStores | VolatileStores
"""A whole set of stores an app is wired from."""
