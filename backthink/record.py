"""The record of a round: one row in the audit log and one canonical log line, always.

`Recorder.save` is the only place a round record is written, whether the
round just ended or its delivery was finished by the next start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog

from backthink.delivery import DeliveryResult
from backthink.errors import StoreError
from backthink.models import (
    Decision,
    Delivery,
    ModelReply,
    Outcome,
    Reason,
    RoundRecord,
    Trigger,
)
from backthink.ports import RoundStore

log = structlog.get_logger("backthink.round")

RESUMED_NOTE = "delivery completed after a restart"
UNKNOWN_TRIGGER = "unknown"  # a delivery row from before rows named their trigger


@dataclass
class Ending:
    """How a round ended, with what it learned on the way."""

    outcome: Outcome
    reason: str
    decision: Decision | None = None
    reply: ModelReply | None = None
    channel: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RoundStart:
    """The identity of a round, fixed when it starts."""

    id: str
    owner_id: str
    trigger: str
    started: datetime


def round_record(start: RoundStart, ending: Ending, *, finished: datetime) -> RoundRecord:
    """The audit record of a round that ran in this process."""
    decision, reply = ending.decision, ending.reply
    return RoundRecord(
        id=start.id,
        owner_id=start.owner_id,
        trigger=start.trigger,
        started_at=start.started,
        finished_at=finished,
        outcome=ending.outcome,
        reason=ending.reason,
        push=decision.push if decision else None,
        urgency=decision.urgency if decision else None,
        decided_channel=decision.channel if decision else None,
        body=decision.body if decision and decision.body else None,
        channel=ending.channel,
        model=reply.model if reply else None,
        prompt_tokens=reply.prompt_tokens if reply else None,
        completion_tokens=reply.completion_tokens if reply else None,
        latency_ms=reply.latency_ms if reply else None,
        raw_reply=reply.text if reply else None,
        notes=list(ending.notes),
    )


def resumed_record(
    delivery: Delivery, result: DeliveryResult, *, finished: datetime
) -> RoundRecord:
    """The record of a round whose process died before recording it, from its outbox row.

    The row holds what was sent and where; the model's cost died with the process.
    """
    notes = [RESUMED_NOTE] + ([result.error] if result.error else [])
    return RoundRecord(
        id=delivery.id,
        owner_id=delivery.owner_id,
        trigger=delivery.trigger or UNKNOWN_TRIGGER,
        started_at=delivery.created_at,
        finished_at=finished,
        outcome=Outcome.DELIVERED if result.sent else Outcome.FAILED,
        reason=delivery.channel if result.sent else Reason.DELIVERY_FAILED,
        push=True,
        urgency=delivery.message.urgency,
        body=delivery.message.text,
        channel=delivery.channel,
        notes=notes,
    )


class Recorder:
    """Writes round records and the one `round.finished` line of each round."""

    def __init__(self, rounds: RoundStore) -> None:
        self._rounds = rounds

    async def save(self, record: RoundRecord) -> bool:
        """Store the record and log the round's canonical line; False when storing failed.

        A failed save is logged, never raised: the round has ended either way.
        """
        saved = True
        try:
            await self._rounds.save(record)
        except StoreError as exc:
            log.error("round.record_failed", error=str(exc))
            saved = False
        log.info(
            "round.finished",
            # A poke's trigger is its own free text: only its kind is logged.
            trigger=Trigger.of(record.trigger).value,
            outcome=record.outcome.value,
            reason=str(record.reason),
            channel=record.channel,
            urgency=record.urgency.value if record.urgency else None,
            latency_ms=record.latency_ms,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            notes=record.notes or None,
        )
        return saved
