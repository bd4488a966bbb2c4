"""What each step of a round returns, and the trail of the steps a round reached.

A round is a line of steps (see `backthink.round.thinker`): the pre-gate
prepares the request (`Prepared`), the model step answers (`Asked`, in
`backthink.round.ask`), the reply is read with both echo guards (`Read`),
the gate judges it (`Judged`), the dispatcher hands it over (a
`DeliveryResult`). Each value is frozen and carries its own notes. The round
keeps the values it reached on its `Trail`, with the tool calls made so far,
and leaves by an `Exit`; `backthink.round.recorder.assemble` makes the record
from the two, whichever way the round left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from backthink.decision.gate import Verdict
from backthink.delivery.dispatcher import DeliveryResult
from backthink.models import Decision, MemoryRef, Outcome
from backthink.records import ModelReply, ToolUse
from backthink.round.ask import Asked
from backthink.round.request import Request
from backthink.tools.loop import Stop


@dataclass(frozen=True)
class Exit:
    """How a round left: its outcome and reason, and a last note when the way out has one."""

    outcome: Outcome
    reason: str
    note: str | None = None


@dataclass(frozen=True)
class Prepared:
    """The request a round that passed its pre-gate sends, and what the round compares it by.

    A round reaches this stage only when it is about to call the model: the
    record of a round that reached it keeps its digest, which is what makes
    it a round that asked (see `backthink.round.unchanged`).
    """

    request: Request
    digest: str
    """What the request says that can change between beats, hashed (`UnchangedBeats.digest`)."""
    last_owner_at: datetime | None
    """When the owner last wrote, as the pre-gate read: the tool loop stops on a newer message."""

    @property
    def notes(self) -> tuple[str, ...]:
        """What building the request noted (cuts, an unreadable state file, the memory)."""
        return tuple(self.request.notes)


@dataclass(frozen=True)
class Read:
    """The reply read once, its decision passed through both echo guards, and what it left.

    A reply the model step stopped on (`stop`) decides nothing: its thought is
    kept, its decision neither judged nor recorded.
    """

    decision: Decision
    stop: Stop | None = None
    suppressed: str | None = None
    """Why the round ends here, before the gate, if it does (a stop, no push, a bad reply)."""
    kept: str | None = None
    """The note of a thought that could not be kept."""
    next_digest: str | None = None
    """For a heartbeat that stays silent: the digest of what the next heartbeat will ask."""

    @property
    def decided(self) -> Decision | None:
        """The decision the record keeps: none from a stopped step."""
        return None if self.stop is not None else self.decision

    @property
    def notes(self) -> tuple[str, ...]:
        """A thought not kept, then the decision's problems."""
        kept = (self.kept,) if self.kept is not None else ()
        return kept if self.stop is not None else (*kept, *self.decision.problems)


@dataclass(frozen=True)
class Judged:
    """The gate's verdict on a push, the instant it was judged at, and its notes."""

    verdict: Verdict
    at: datetime
    notes: tuple[str, ...] = ()


@dataclass
class Trail:
    """The stages a round reached, each written in by the round as it returns.

    The round owns it and is its only writer; the record's assembly reads it
    once, at whichever exit the round takes, so a round that fails or is cut
    off after the model answered still records the reply, its cost and its
    decision. `uses` is the model step's `on_use`: it grows while the tool
    loop runs, so a round cut off in the middle still records the calls it made.
    """

    slot: str | None = None
    """The note of a queued round's slot (see `slot_note`): a record's first note."""
    prepared: Prepared | None = None
    asked: Asked | None = None
    read: Read | None = None
    judged: Judged | None = None
    delivered: DeliveryResult | None = None
    uses: list[ToolUse] = field(default_factory=list)

    def notes(self) -> Iterator[str]:
        """Every stage's notes in the order the stages were reached."""
        if self.slot is not None:
            yield self.slot
        for stage in (self.prepared, self.asked, self.read, self.judged):
            if stage is not None:
                yield from stage.notes
        sent = self.delivered
        if sent is not None:
            yield from sent.notes
            if not sent.sent and sent.error:
                yield sent.error

    @property
    def reply(self) -> ModelReply | None:
        """The reply the model step ended with, if it got one."""
        return self.asked.reply if self.asked is not None else None

    @property
    def decision(self) -> Decision | None:
        """The decision the reply made, once read and guarded."""
        return self.read.decided if self.read is not None else None

    @property
    def channel(self) -> str | None:
        """The channel that delivered or was tried last; else the one the gate chose to send on."""
        if self.judged is None:
            return None
        chosen = self.judged.verdict.channel if self.judged.verdict.deliver else None
        if self.delivered is not None:
            return self.delivered.channel or chosen
        return chosen

    @property
    def digest(self) -> str | None:
        """What the next heartbeat is compared with: set once the round calls the model."""
        if self.read is not None and self.read.next_digest is not None:
            return self.read.next_digest
        return self.prepared.digest if self.prepared is not None else None

    @property
    def recalled(self) -> tuple[MemoryRef, ...]:
        """What of the memory the request showed."""
        return tuple(self.prepared.request.recalled) if self.prepared is not None else ()

    @property
    def offered(self) -> tuple[str, ...]:
        """The tools the model step offered."""
        return self.asked.offered if self.asked is not None else ()
