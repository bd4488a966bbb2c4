"""The record of a round: one row in the audit log and one canonical log line, always.

`assemble` is the only place a round that ran here is made into its record,
from the stages it reached (`backthink.round.stages`), whichever way it left.
`Recorder.save` is the only place a round record is written, whether the
round just ended or its delivery was finished by the next start. A record the
database refuses (locked past the busy timeout, read-only, deleted, the disk
full) is kept in the spill beside the database (`backthink.round.spill`), in
a reserve allocated beforehand when the disk is full, and written in at the
next chance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from backthink.delivery.dispatcher import DeliveryResult
from backthink.errors import BackthinkError, StoreError
from backthink.models import Outcome, Reason, Trigger
from backthink.ports import RoundStore
from backthink.records import Delivery, RoundRecord
from backthink.round.spill import Spill, disk_full
from backthink.round.stages import Exit, Trail

log = structlog.get_logger(__name__)

RESUMED_NOTE = "delivery completed after a restart"
INTERRUPTED_NOTE = "cut off by shutdown before it ended"
UNKNOWN_TRIGGER = "unknown"  # a delivery row from before rows named their trigger


@dataclass(frozen=True)
class RoundStart:
    """The identity of a round, fixed when it starts."""

    id: str
    owner_id: str
    trigger: str
    started: datetime


REPLY_CHARS_PER_TOKEN = 16
"""Characters one token of a reply may hold at most, whitespace runs aside: a reply longer
than `model.max_tokens` times this is the endpoint's fault, and is kept cut."""
REPLY_CUT = "\n…[{cut} characters cut: the reply is longer than model.max_tokens allows]…\n"
REPLY_HEAD_SHARE = 0.75  # of a cut reply's room kept from its head; the footer ends it


def reply_chars(max_tokens: int) -> int:
    """The longest reply (or body) a round record keeps whole, for `model.max_tokens`."""
    return max_tokens * REPLY_CHARS_PER_TOKEN


def bounded(text: str | None, limit: int | None) -> str | None:
    """`text` within `limit` characters: its head and its end around a marker saying the cut."""
    if text is None or limit is None or len(text) <= limit:
        return text
    marker = REPLY_CUT.format(cut=len(text) - limit)
    room = max(limit - len(marker), 0)
    head = int(room * REPLY_HEAD_SHARE)
    tail = room - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def assemble(
    start: RoundStart,
    left: Exit,
    trail: Trail,
    *,
    finished: datetime,
    max_reply_chars: int | None = None,
) -> RoundRecord:
    """The audit record of a round that ran in this process, from the stages it reached.

    Every way out of a round comes here (a delivery, a skip, a cancellation,
    a database error, a bug), so a round keeps the same things whichever way
    it left: the model's reply and cost, the decision, the tools, the notes
    of every stage it reached, then the exit's own note. With
    `max_reply_chars` (see `reply_chars`), a longer raw reply or body is kept
    cut, with a marker and a note: what an endpoint sends past its token limit
    must not make every page and database row of it huge.
    """
    decision, reply = trail.decision, trail.reply
    raw = reply.text if reply else None
    notes = [*trail.notes(), *((left.note,) if left.note is not None else ())]
    if raw is not None and max_reply_chars is not None and len(raw) > max_reply_chars:
        notes.append(
            f"reply_cut: kept {max_reply_chars} of {len(raw)} characters, more than "
            "model.max_tokens allows"
        )
    body = decision.body if decision and decision.body else None
    return RoundRecord(
        id=start.id,
        owner_id=start.owner_id,
        trigger=start.trigger,
        started_at=start.started,
        finished_at=finished,
        outcome=left.outcome,
        reason=left.reason,
        push=decision.push if decision else None,
        urgency=decision.urgency if decision else None,
        decided_channel=decision.channel if decision else None,
        body=bounded(body, max_reply_chars),
        channel=trail.channel,
        model=reply.model if reply else None,
        prompt_tokens=reply.prompt_tokens if reply else None,
        completion_tokens=reply.completion_tokens if reply else None,
        latency_ms=reply.latency_ms if reply else None,
        raw_reply=bounded(raw, max_reply_chars),
        notes=notes,
        tools=list(trail.uses),
        recalled=list(trail.recalled),
        digest=trail.digest,
        offered=list(trail.offered),
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


def unstarted_record(
    start: RoundStart, error: BackthinkError, *, finished: datetime
) -> RoundRecord:
    """The record of a round that could not start: its owner's app could not be wired.

    A database that failed is `failed/store_error`; anything else (an owner's
    settings that stopped working, an owner that is gone) is `failed/internal_error`.
    """
    reason = Reason.STORE_ERROR if isinstance(error, StoreError) else Reason.INTERNAL_ERROR
    return assemble(start, Exit(Outcome.FAILED, reason, str(error)), Trail(), finished=finished)


class Recorder:
    """Writes round records and the one `round.finished` line of each round."""

    def __init__(self, rounds: RoundStore, *, spill: Spill | None = None) -> None:
        self._rounds = rounds
        self._spill = spill

    async def save(self, record: RoundRecord) -> bool:
        """Store the record and log the round's canonical line; False when it went to the spill.

        A failed save is logged and spilled, never raised: the round has ended either way.
        """
        saved = True
        try:
            await self._rounds.save(record)
        except StoreError as exc:
            saved = False
            self._keep(record, exc)
        else:
            await self.drain()
        # A failed round is a problem to look at; every other ending is the daemon's routine.
        emit = log.warning if record.outcome is Outcome.FAILED else log.info
        emit(
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
            # Tool names only: arguments and results may hold the owner's private text.
            tools=[use.name for use in record.tools] or None,
        )
        return saved

    async def drain(self, *, thorough: bool = False) -> int:
        """Write in the records the database refused earlier, if any; never raises.

        After a save only the spill file itself is looked for; `thorough` (at
        start) also takes over what a crashed process had claimed.
        """
        if self._spill is None or not (thorough or self._spill.waiting()):
            return 0
        try:
            return await self._spill.drain(self._rounds)
        except OSError as exc:
            log.error("round.spill_failed", error=exc.strerror or type(exc).__name__)
            return 0

    def _keep(self, record: RoundRecord, exc: StoreError) -> None:
        if self._spill is None:
            log.error("round.record_failed", error=str(exc), kept=False)
            return
        try:
            in_spill = self._spill.append(record)
        except OSError as spill_exc:
            log.error(
                "round.record_failed",
                error=str(exc),
                kept=False,
                spill_error=spill_exc.strerror or type(spill_exc).__name__,
                disk_full=disk_full(spill_exc),
            )
            return
        if in_spill:
            log.error("round.record_failed", error=str(exc), kept=True, spill=str(self._spill.path))
            return
        log.error(
            "round.disk_full",
            error=str(exc),
            kept=True,
            reserve=str(self._spill.reserve),
            waiting=self._spill.in_reserve(),
        )


SLOT_NOTE = "scheduled for "


def slot_note(scheduled_for: datetime, started: datetime) -> str:
    """The note of a queued round: its slot (UTC, ISO 8601) and how late it began."""
    late = max(0.0, (started - scheduled_for).total_seconds())
    return f"{SLOT_NOTE}{scheduled_for.astimezone(UTC).isoformat()}, began {late:.1f} s later"
