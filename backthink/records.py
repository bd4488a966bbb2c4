"""What rounds exchange and leave behind: model messages and replies, round records, deliveries."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from backthink.models import MemoryRef, Outcome, Role, Urgency


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool call a model asked for; `arguments` is the raw JSON text it wrote."""

    id: str
    name: str
    arguments: str = ""


class ToolUse(_Frozen):
    """The audit of one tool call: the name as offered, whether it worked, how long it took.

    Never the arguments or the result: those may hold the owner's private text.
    """

    name: str
    ok: bool
    ms: float
    args_chars: int = 0


class ModelMessage(_Frozen):
    """One message of a model request, before any SDK sees it.

    `image` travels as an image content part beside the text. An assistant
    message may carry the `tool_calls` it made; a `tool` message answers one
    of them by `tool_call_id`.
    """

    role: Role
    text: str
    image: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class ModelReply(_Frozen):
    """What one model round returned, with its cost.

    With tools offered, a reply may ask for `tool_calls` instead of (or beside) text.
    """

    text: str
    model: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float
    notes: list[str] = Field(default_factory=list)
    """What the client changed to get this reply (e.g. images left out), for the round's record."""


class RoundRecord(_Frozen):
    """The audit record of one round: what triggered it, what was decided, how it ended."""

    id: str
    owner_id: str
    trigger: str
    started_at: AwareDatetime
    finished_at: AwareDatetime
    outcome: Outcome
    reason: str
    push: bool | None = None
    urgency: Urgency | None = None
    decided_channel: str | None = None
    body: str | None = None
    channel: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None
    raw_reply: str | None = None
    notes: list[str] = Field(default_factory=list)
    tools: list[ToolUse] = Field(default_factory=list)
    recalled: list[MemoryRef] = Field(default_factory=list)
    digest: str | None = None
    """What the round's request said that can change between beats, hashed; set when it
    called the model (a later heartbeat that would ask the same is skipped)."""
    offered: list[str] = Field(default_factory=list)
    """The names of the tools the round offered, as offered (`cal__agenda`)."""

    @field_validator("trigger", "reason")
    @classmethod
    def _plain_text(cls, value: str) -> str:
        # A Trigger or Reason member is stored as its plain value, like any other text.
        return str(value)

    def summary(self) -> dict[str, Any]:
        """The public JSON shape of a round (no raw reply, no secrets)."""
        return {
            "round_id": self.id,
            "owner_id": self.owner_id,
            "trigger": self.trigger,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "outcome": self.outcome.value,
            "reason": self.reason,
            "channel": self.channel,
            "decision": None
            if self.push is None
            else {
                "push": self.push,
                "channel": self.decided_channel,
                "urgency": self.urgency.value if self.urgency else None,
                "body": self.body,
            },
            "model": self.model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms": self.latency_ms,
            "notes": list(self.notes),
            "tools": [{"name": t.name, "ok": t.ok, "ms": t.ms} for t in self.tools],
            "recalled": [{"kind": ref.kind, "id": ref.id} for ref in self.recalled],
        }


def _iso(value: datetime) -> str:
    return value.isoformat()


class OutgoingMessage(_Frozen):
    """What a channel delivers: one short message of one round."""

    round_id: str
    owner_id: str
    persona_id: str
    persona_name: str = ""
    text: str
    urgency: Urgency = Urgency.ROUTINE
    created_at: AwareDatetime

    def webhook_body(self) -> dict[str, Any]:
        """The JSON document a webhook receives."""
        return {
            "round_id": self.round_id,
            "owner_id": self.owner_id,
            "persona": {"id": self.persona_id, "name": self.persona_name},
            "text": self.text,
            # The same words under the name chat apps' incoming webhooks read (Open WebUI's
            # Channels), so a push can be posted to one as it is.
            "content": self.text,
            "urgency": self.urgency.value,
            "created_at": _iso(self.created_at),
        }


class DeliveryStatus(StrEnum):
    """Where an outbox row stands."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class Delivery(_Frozen):
    """One outbox row: a message on its way to one channel; its id is the round id."""

    id: str
    owner_id: str
    channel: str
    message: OutgoingMessage
    status: DeliveryStatus = DeliveryStatus.PENDING
    attempts: int = 0
    next_attempt_at: AwareDatetime | None = None
    last_error: str | None = None
    created_at: AwareDatetime
    updated_at: AwareDatetime
    trigger: str | None = None
    """The trigger of the delivery's round, so a round cut short is recorded with it."""
