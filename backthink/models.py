"""The shared vocabulary of backthink: its enums, messages, memories, owners, state and decisions.

The ground floor: every room imports it, and it imports nothing of backthink.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

MAIN_SESSION = "main"
"""The owner's main conversation: the one a round reads and writes back into."""

Language = Literal["zh", "en"]
"""The languages of the prompts, the persona and the footer's tag names."""

FUTURE_SKEW = timedelta(minutes=5)
"""A time this far past now is clock skew between machines; later, it is mis-dated."""


def credible(when: datetime, now: datetime) -> bool:
    """Whether a time written by another program can be true now (not beyond the clock skew)."""
    return when <= now + FUTURE_SKEW


def known_zone(value: str) -> str:
    """Check an IANA time zone name.

    Raises:
        ValueError: no such zone.
    """
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}") from None
    return value


class Urgency(StrEnum):
    """How strongly the model says a message may disturb the owner."""

    ROUTINE = "routine"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """Order of the levels: routine < warning < critical."""
        return _URGENCY_RANK[self]


_URGENCY_RANK = {Urgency.ROUTINE: 0, Urgency.WARNING: 1, Urgency.CRITICAL: 2}


class Outcome(StrEnum):
    """How a round ended. Every round ends with exactly one of these and a reason."""

    SKIPPED = "skipped"
    SUPPRESSED = "suppressed"
    DELIVERED = "delivered"
    FAILED = "failed"


class Trigger(StrEnum):
    """What started a round. A poke carries free text; every other trigger is one of these."""

    HEARTBEAT = "heartbeat"
    STARTUP = "startup"
    CRON = "cron"
    POKE = "poke"

    @classmethod
    def of(cls, text: str) -> Trigger:
        """The kind of a round's trigger text: a named trigger, or a poke's free text."""
        key = text.strip().lower()
        return cls(key) if key in _NAMED_TRIGGERS else cls.POKE


_NAMED_TRIGGERS = frozenset({Trigger.HEARTBEAT, Trigger.STARTUP, Trigger.CRON})


class Reason(StrEnum):
    """Why a round ended as it did; a delivered round's reason is its channel's name instead."""

    # skipped (no model call)
    BUSY = "busy"
    OWNER_ACTIVE = "owner_active"
    QUIET_HOURS = "quiet_hours"
    NO_ROUTE = "no_route"
    DISABLED = "disabled"
    NO_MODEL = "no_model"
    UNCHANGED = "unchanged"
    # suppressed (the model answered; nothing is sent)
    NO_PUSH = "no_push"
    PARSE_FAILED = "parse_failed"
    EMPTY_BODY = "empty_body"
    BODY_TOO_LONG = "body_too_long"
    UNAVAILABLE = "unavailable"
    MIN_INTERVAL = "min_interval"
    DAILY_CAP = "daily_cap"
    UNANSWERED = "unanswered"
    DUPLICATE = "duplicate"
    TOOL_LIMIT = "tool_limit"
    # failed
    MODEL_ERROR = "model_error"
    MODEL_TIMEOUT = "model_timeout"
    DELIVERY_FAILED = "delivery_failed"
    STORE_ERROR = "store_error"
    INTERRUPTED = "interrupted"
    INTERNAL_ERROR = "internal_error"


class StateProblem(StrEnum):
    """Why no owner state is known this round (the state block is then absent)."""

    NOT_CONFIGURED = "state_not_configured"
    MISSING = "state_missing"
    UNREADABLE = "state_unreadable"
    INVALID = "state_invalid"
    UNDATED = "state_undated"
    FROM_FUTURE = "state_from_future"
    STALE = "state_stale"
    TOO_LARGE = "state_too_large"

    @property
    def expected(self) -> bool:
        """True for the normal "nobody set up a state file" cases, not worth a note."""
        return self in (StateProblem.NOT_CONFIGURED, StateProblem.MISSING)


class Availability(StrEnum):
    """What the owner-state file says about the owner right now."""

    AVAILABLE = "available"
    BUSY = "busy"
    DND = "dnd"


Role = Literal["user", "assistant", "system", "tool"]
Origin = Literal["chat", "proactive"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(_Frozen):
    """One stored message of an owner's session.

    `speaker` is the persona id that said an assistant message; `channel` is
    where a message was said (None means the main session's own interface).
    """

    id: int | None = None
    owner_id: str
    session_id: str = MAIN_SESSION
    role: str
    text: str
    image: str | None = None
    speaker: str | None = None
    channel: str | None = None
    origin: Origin = "chat"
    created_at: AwareDatetime
    round_id: str | None = None
    """The round a written-back message belongs to."""
    undelivered: bool = False
    """A written-back push whose delivery failed: kept for the gate, not shown to the model."""
    client_id: str | None = None
    """The id a chat app gave the message (unique per owner): sending it again stores nothing."""
    chat_id: str | None = None
    """The front-end chat a relayed message belongs to (its own id, or one the relay gave it)."""
    superseded: bool = False
    """Left behind by an edit or a branch in the front-end: kept, never read by a round."""


class MemoryKind(StrEnum):
    """What a long-term memory holds."""

    NOTE = "note"
    """A fact worth keeping (the owner's sister has a recital on Saturday)."""
    PROFILE = "profile"
    """An evergreen fact about the owner (name, job, allergies)."""
    THOUGHT = "thought"
    """The companion's private thought of one round (the text before the footer)."""


class Memory(_Frozen):
    """One long-term memory of an owner.

    `source` says who wrote it: ``round:<id>``, ``chat`` or ``cli``; a memory a
    round wrote also carries that round's id. `untrusted` marks a thought
    that quotes outside text: it keeps that text's provenance.
    """

    id: int | None = None
    owner_id: str
    kind: MemoryKind
    text: str
    created_at: AwareDatetime
    source: str
    round_id: str | None = None
    untrusted: bool = False


class Owner(_Frozen):
    """One person a companion serves, with what differs from the global settings.

    `language`, `persona` (the persona prompt file), `state_file` and each
    `gate` key fall back to the global value when unset; `channels` maps a
    channel name to the keys that differ for this owner (a webhook `url`, an
    apprise `url`), or to a whole channel of its own (with `type`). `source`
    says who manages the row: `config` for the config file's owners (written
    in at every start), `cli` for `backthink owners`.
    """

    id: str = Field(min_length=1, max_length=200)
    name: str = ""
    timezone: str = "UTC"
    language: Literal["zh", "en"] | None = None
    persona: str | None = None
    state_file: str | None = None
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    gate: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True
    source: Literal["config", "cli"] = "cli"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return known_zone(value)


class MemoryRef(_Frozen):
    """A memory or an older message a round's prompt showed: its kind and id, never its text.

    `thought` is a journal entry and `memory` a recalled memory (both rows of
    the memory table), `message` a recalled main-session message. Only ids are
    kept on the round, so what `forget` removes is gone from the record too.
    """

    kind: Literal["thought", "memory", "message"]
    id: int


class Recalled(_Frozen):
    """One recalled item: a memory or an older main-session message, with its score.

    `memory_kind` is set for a memory, `role` and `origin` for a message.
    """

    kind: Literal["memory", "message"]
    id: int
    text: str
    created_at: AwareDatetime
    score: float
    memory_kind: MemoryKind | None = None
    role: str | None = None
    origin: Origin | None = None
    untrusted: bool = False
    """A thought that quotes outside text (see `Memory.untrusted`)."""


@dataclass(frozen=True)
class SessionView:
    """What a round reads before it thinks, in one read of the main session.

    `recent` is the history shown to the model, oldest first;
    `last_owner_message_at` is when the owner last wrote, however far back.
    """

    recent: list[Message]
    last_owner_message_at: datetime | None


DeliveryState = Literal["delivered", "undelivered", "pending"]


@dataclass(frozen=True)
class SessionEntry:
    """One message of the session as chat apps see it: a push carries its delivery state."""

    message: Message
    delivery: DeliveryState | None = None
    """None for a chat message; for a push: delivered, undelivered or still pending."""

    def to_json(self) -> dict[str, Any]:
        """The message object of `GET /v1/messages` and `messages list --json`; times in UTC."""
        m = self.message
        return {
            "id": m.id,
            "client_id": m.client_id,
            "role": m.role,
            "text": m.text,
            "image": m.image,
            "at": m.created_at.astimezone(UTC).isoformat(),
            "channel": m.channel,
            "speaker": m.speaker,
            "origin": m.origin,
            "delivery": self.delivery,
            # Only listings that ask for every message (`all=1`, `--all`) hold one.
            **({"superseded": True} if m.superseded else {}),
        }


@dataclass(frozen=True)
class PastPush:
    """A proactive message already delivered (written back into the main session)."""

    at: datetime
    body: str
    channel: str | None = None


@dataclass(frozen=True)
class OwnerActivity:
    """What the gate reads once the model has answered, in one read of the main session.

    `owner_messages` holds (channel, created_at) of the owner's newest
    messages and `pushes` the newest proactive messages, both newest first.
    """

    owner_messages: list[tuple[str | None, datetime]]
    pushes: list[PastPush]


class Decision(_Frozen):
    """The model's parsed footer. Anything unclear has already fallen back to "no push"."""

    push: bool = False
    channel: str | None = None
    urgency: Urgency = Urgency.ROUTINE
    body: str = ""
    problems: list[str] = Field(default_factory=list)


class _Lenient(BaseModel):
    # Written by other programs, which may add keys of their own: ignore them.
    model_config = ConfigDict(frozen=True, extra="ignore")


class ScheduleItem(_Lenient):
    """One upcoming item of the owner's schedule."""

    at: AwareDatetime
    title: str


class RoundState(_Lenient):
    """The owner's current state, read once per round; the prompt and the gate share it."""

    updated_at: AwareDatetime | None = None
    availability: Availability | None = None
    device: dict[str, Any] = Field(default_factory=dict)
    schedule: list[ScheduleItem] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class StateReading(_Frozen):
    """A RoundState when one is known, else why not (missing, stale, unreadable).

    `detail` says more about the problem (the OS error, the broken key) for the record.
    """

    state: RoundState | None = None
    problem: StateProblem | None = None
    detail: str | None = None

    @property
    def note(self) -> str | None:
        """The problem as one line for the round's notes, e.g. ``state_invalid: not JSON``."""
        if self.problem is None:
            return None
        return f"{self.problem.value}: {self.detail}" if self.detail else self.problem.value

    @property
    def known(self) -> bool:
        """True when a fresh, valid state snapshot was read."""
        return self.state is not None
