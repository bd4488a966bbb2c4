"""The SQLModel tables: message, round, the delivery outbox, long-term memory, owners, tokens.

Rows are storage only; the stores convert them to the pydantic models of
`backthink.models` at the boundary, so no row object leaves this package.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from backthink.models import MAIN_SESSION, MemoryKind
from backthink.store.columns import UTCDateTime

# Deterministic constraint names let later revisions drop or alter a constraint
# by name, which SQLite's copy-and-move batch migrations need.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""backthink's own metadata, apart from SQLModel's global one."""

DELIVERY_STATUSES = ("pending", "sent", "failed")
ORIGINS = ("chat", "proactive")
MEMORY_KINDS = tuple(kind.value for kind in MemoryKind)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({listed})"


class _Table(SQLModel, registry=registry(metadata=metadata)):
    """Base of backthink's tables, bound to `metadata`."""


class MessageRow(_Table, table=True):
    """One stored message; `recent` reads it through `ix_message_recent`."""

    __tablename__ = "message"
    __table_args__ = (
        # The newest messages of one session are a backward walk of this index,
        # so reading the last N costs the same at any history size.
        Index("ix_message_recent", "owner_id", "session_id", "created_at", "id"),
        # The gate reads the owner's latest proactive messages; without this index
        # that read would walk back through every chat message in between.
        Index("ix_message_origin", "owner_id", "session_id", "origin", "created_at", "id"),
        # The owner's newest messages (the activity gate, the reply channel) without
        # walking back through every companion message written since.
        Index("ix_message_role", "owner_id", "session_id", "role", "created_at", "id"),
        # A failed delivery marks its write-back by round id; only write-backs carry one.
        Index(
            "ix_message_round",
            "round_id",
            sqlite_where=text("round_id IS NOT NULL"),
            postgresql_where=text("round_id IS NOT NULL"),
        ),
        CheckConstraint(_one_of("origin", ORIGINS), name="origin"),
        # A chat app's own id for a message makes sending it twice harmless.
        Index(
            "ix_message_client",
            "owner_id",
            "client_id",
            unique=True,
            sqlite_where=text("client_id IS NOT NULL"),
            postgresql_where=text("client_id IS NOT NULL"),
        ),
    )

    # INTEGER (not BIGINT) so that SQLite makes it an alias of the rowid.
    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    owner_id: str = Field(sa_type=String)
    session_id: str = Field(default=MAIN_SESSION, sa_type=String)
    role: str = Field(sa_type=String)
    text: str = Field(sa_type=Text)
    image: str | None = Field(default=None, sa_type=Text)
    speaker: str | None = Field(default=None, sa_type=String)
    channel: str | None = Field(default=None, sa_type=String)
    origin: str = Field(default="chat", sa_type=String)
    # Set on a write-back: the round it belongs to, and whether its delivery failed.
    round_id: str | None = Field(default=None, sa_type=String)
    undelivered: bool = Field(
        default=False, sa_type=Boolean, sa_column_kwargs={"server_default": false()}
    )
    created_at: datetime = Field(sa_type=UTCDateTime)
    client_id: str | None = Field(default=None, sa_type=String)
    # The front-end chat a relayed message belongs to, and whether an edit left it behind.
    chat_id: str | None = Field(default=None, sa_type=String)
    superseded: bool = Field(
        default=False, sa_type=Boolean, sa_column_kwargs={"server_default": false()}
    )


class RoundRow(_Table, table=True):
    """The audit record of one round.

    `notes` is a JSON list of strings, `tools` of calls, `recalled` of the
    `{kind, id}` of the memories and messages its prompt showed, `offered` of
    the names of the tools it offered. `digest` is set on rounds that called
    the model (see `backthink.round.unchanged`).
    """

    __tablename__ = "round"
    __table_args__ = (Index("ix_round_owner_started", "owner_id", "started_at"),)

    id: str = Field(primary_key=True, sa_type=String)
    owner_id: str = Field(sa_type=String)
    trigger: str = Field(sa_type=String)
    started_at: datetime = Field(sa_type=UTCDateTime)
    finished_at: datetime = Field(sa_type=UTCDateTime)
    outcome: str = Field(sa_type=String)
    reason: str = Field(sa_type=Text)
    push: bool | None = Field(default=None, sa_type=Boolean)
    urgency: str | None = Field(default=None, sa_type=String)
    decided_channel: str | None = Field(default=None, sa_type=String)
    body: str | None = Field(default=None, sa_type=Text)
    channel: str | None = Field(default=None, sa_type=String)
    model: str | None = Field(default=None, sa_type=String)
    prompt_tokens: int | None = Field(default=None, sa_type=Integer)
    completion_tokens: int | None = Field(default=None, sa_type=Integer)
    latency_ms: float | None = Field(default=None, sa_type=Float)
    raw_reply: str | None = Field(default=None, sa_type=Text)
    notes: str = Field(default="[]", sa_type=Text)
    tools: str = Field(default="[]", sa_type=Text, sa_column_kwargs={"server_default": "[]"})
    recalled: str = Field(default="[]", sa_type=Text, sa_column_kwargs={"server_default": "[]"})
    # The digest of what the request said, on rounds that called the model.
    digest: str | None = Field(default=None, sa_type=String)
    offered: str = Field(default="[]", sa_type=Text, sa_column_kwargs={"server_default": "[]"})


class DeliveryRow(_Table, table=True):
    """The outbox: one delivery per round (its id is the round id), retried until done."""

    __tablename__ = "delivery"
    __table_args__ = (
        CheckConstraint(_one_of("status", DELIVERY_STATUSES), name="status"),
        Index("ix_delivery_status_next", "status", "next_attempt_at"),
        Index("ix_delivery_created", "created_at"),
    )

    id: str = Field(primary_key=True, sa_type=String)
    owner_id: str = Field(sa_type=String, sa_column_kwargs={"server_default": "default"})
    channel: str = Field(sa_type=String)
    payload: str = Field(sa_type=Text)
    status: str = Field(default="pending", sa_type=String)
    attempts: int = Field(default=0, sa_type=Integer)
    next_attempt_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_error: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(sa_type=UTCDateTime)
    updated_at: datetime = Field(sa_type=UTCDateTime)
    # The trigger of the delivery's round: a round cut short by a crash is recorded
    # from this row (its id is the round id) once the delivery completes.
    trigger: str | None = Field(default=None, sa_type=String)


class MarkRow(_Table, table=True):
    """A named per-owner timestamp, e.g. when the last startup greeting began."""

    __tablename__ = "mark"

    owner_id: str = Field(primary_key=True, sa_type=String)
    name: str = Field(primary_key=True, sa_type=String)
    at: datetime = Field(sa_type=UTCDateTime)


class MemoryRow(_Table, table=True):
    """One long-term memory; the newest of a kind are a backward walk of `ix_memory_recent`.

    Other programs (the chat app) may write rows here directly; the full-text
    index (`memory_fts`, SQLite) is kept current by triggers, not by backthink.
    """

    __tablename__ = "memory"
    __table_args__ = (
        Index("ix_memory_recent", "owner_id", "kind", "created_at", "id"),
        CheckConstraint(_one_of("kind", MEMORY_KINDS), name="kind"),
    )

    # INTEGER (not BIGINT) so that SQLite makes it an alias of the rowid, which the
    # full-text index points at.
    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    owner_id: str = Field(sa_type=String)
    kind: str = Field(sa_type=String)
    text: str = Field(sa_type=Text)
    created_at: datetime = Field(sa_type=UTCDateTime)
    source: str = Field(sa_type=String)
    round_id: str | None = Field(default=None, sa_type=String)
    # A kept thought that quotes outside text carries its provenance (see MemoryKind).
    untrusted: bool = Field(
        default=False, sa_type=Boolean, sa_column_kwargs={"server_default": false()}
    )


OWNER_SOURCES = ("config", "cli")


class OwnerRow(_Table, table=True):
    """One owner; `channels` and `gate` are JSON objects of per-owner overrides.

    `next_due_at` and `greeted_at` are the distributed worker's schedule: when
    the owner's next heartbeat is due, and when a worker last began its startup
    greeting. The one-machine daemon keeps its schedule in memory instead.
    """

    __tablename__ = "owner"
    __table_args__ = (
        CheckConstraint(_one_of("source", OWNER_SOURCES), name="source"),
        Index("ix_owner_due", "enabled", "next_due_at"),
    )

    id: str = Field(primary_key=True, sa_type=String)
    name: str = Field(default="", sa_type=Text)
    timezone: str = Field(sa_type=String)
    language: str | None = Field(default=None, sa_type=String)
    persona: str | None = Field(default=None, sa_type=Text)
    state_file: str | None = Field(default=None, sa_type=Text)
    channels: str = Field(default="{}", sa_type=Text)
    gate: str = Field(default="{}", sa_type=Text)
    enabled: bool = Field(default=True, sa_type=Boolean)
    source: str = Field(sa_type=String)
    updated_at: datetime = Field(sa_type=UTCDateTime)
    next_due_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    greeted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class ApiTokenRow(_Table, table=True):
    """One bearer token of the API: only its SHA-256 digest is kept, never the token."""

    __tablename__ = "api_token"
    __table_args__ = (Index("ix_api_token_owner", "owner_id"),)

    digest: str = Field(primary_key=True, sa_type=String)
    owner_id: str = Field(sa_type=String)
    created_at: datetime = Field(sa_type=UTCDateTime)
