"""Unchanged beats: a heartbeat that would ask the model what the last silent round asked.

Most heartbeats end `no_push`, and a heartbeat that sees what the previous
silent one saw (no new message, the same state, the same journal and
recalled items, the same part of the same day) would pay for the same
question again. Each round that calls the model keeps a digest of what its
request was built from that can change between beats (the window as read,
the state's facts, the journal and recalled ids); a heartbeat that ends
`no_push` keeps instead the digest of what the next heartbeat will see if
nothing else happens (its own thought is in the journal by then), hashed
from its own request with the memory read again, not from a second build. A heartbeat whose
digest equals that of the owner's last round that called the model, when
that round ended `no_push` less than `schedule.max_silence` ago, ends
`skipped/unchanged` without a model call. Greetings, cron rounds and pokes
always ask.

What the digest leaves out on purpose: the clock inside the part of the day
(the request's "now" line and the exact "in 2 h" of schedule items, which
change every beat while nothing else does), and the state's `updated_at` (a
sync that rewrites the same facts says nothing new), and where the history
was cut to fit (it moves when the memory block grows, while nothing was
said). An upcoming item
entering or leaving the state block's 24-hour horizon does change it, and so
does a schedule item or a time of day the conversation names coming near or
due (`clock_mentions.lead`): a reminder that was too early an hour ago may be
due now.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from backthink.config import QuietHours, Settings
from backthink.memory.block import MemoryBlock
from backthink.memory.recollect import recollect
from backthink.models import Outcome, Reason, StateReading, Trigger
from backthink.ports import MemoryStore, RoundStore
from backthink.records import RoundRecord
from backthink.round.clock_mentions import lead, near_times
from backthink.round.prompts import SCHEDULE_HORIZON
from backthink.round.request import Request

PARTS_OF_DAY = ((18, "evening"), (12, "afternoon"), (6, "morning"), (0, "night"))
"""The owner's local hour each part of the day begins at, latest first."""
WIND_DOWN = timedelta(hours=2)
"""Before quiet hours begin, this long counts as a part of the day of its own."""


def winding_down(local: datetime, quiet: QuietHours | None) -> bool:
    """Whether the owner's quiet hours begin within `WIND_DOWN` of `local` (a local time)."""
    if quiet is None:
        return False
    start = local.replace(hour=quiet.start.hour, minute=quiet.start.minute, second=0)
    if start <= local:
        start += timedelta(days=1)
    return start - local <= WIND_DOWN


def part_of_day(local: datetime) -> str:
    """night 0-6, morning 6-12, afternoon 12-18, evening 18-24, by the local hour."""
    return next(name for hour, name in PARTS_OF_DAY if local.hour >= hour)


def beat_digest(
    request: Request,
    *,
    at: datetime,
    tz: ZoneInfo,
    quiet: QuietHours | None = None,
    memory: MemoryBlock | None = None,
) -> str:
    """A hash of what `request`, built at `at`, was built from that can change between beats.

    What the round read, not how it was laid out: the window as read, the
    state's facts, the journal and recalled ids of `memory` (default: the
    request's own). A thought kept by a round changes the journal, and with
    it where the history is cut; hashing the reads keeps the digest of the
    next beat computable without building its request (`next_beat_digest`).
    With `quiet` hours, the last `WIND_DOWN` before they begin counts as a
    part of the day of its own: the last moment a routine message may still go out.
    """
    memory = memory if memory is not None else request.memory
    local = at.astimezone(tz)
    said: dict[str, Any] = {
        "trigger": Trigger.of(request.trigger).value,
        "date": local.date().isoformat(),
        "part": part_of_day(local),
        "winding_down": winding_down(local, quiet),
        "window": [[m.id, m.role, m.speaker, m.text, m.image] for m in request.window],
        "state": _state_facts(request.state, at),
        "journal": [m.id for m in memory.thoughts],
        "recalled": [[item.kind, item.id] for item in memory.recalled],
        "times": near_times(
            [m.text for m in request.window] + [t.text for t in memory.thoughts], at=at, tz=tz
        ),
    }
    text = json.dumps(said, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def next_beat_digest(
    request: Request,
    *,
    memories: MemoryStore | None,
    settings: Settings,
    owner_id: str,
    at: datetime,
) -> str:
    """The digest of the request the next heartbeat sends when nothing happens but this round.

    A silent round still changes what the next one reads: it keeps its
    thought in the journal (and may have remembered a note), so the journal
    and recall are read again once it has decided. Everything else is what
    `request` was built from at `at`; the request is not built again.
    """
    memory = await recollect(memories, settings.memory, owner_id, request.window)
    s = settings
    return beat_digest(request, at=at, tz=s.owner.tz, quiet=s.gate.quiet_hours, memory=memory)


def _state_facts(reading: StateReading, at: datetime) -> Any:
    """The facts the state block shows, without its clock; why it is absent, if it is."""
    state = reading.state
    if state is None:
        return None if reading.problem is None else reading.problem.value
    upcoming = sorted(
        (item.at.isoformat(), item.title, lead(item.at - at))
        for item in state.schedule
        if at <= item.at <= at + SCHEDULE_HORIZON
    )
    return {
        "availability": state.availability.value if state.availability else None,
        "device": state.device,
        "schedule": upcoming,
        "notes": state.notes,
    }


def asks_every_time(trigger: str) -> bool:
    """Whether a round of this trigger always calls the model (all but heartbeats do)."""
    return Trigger.of(trigger) is not Trigger.HEARTBEAT


async def same_silent_round(
    rounds: RoundStore, owner_id: str, digest: str, *, at: datetime, max_silence: timedelta
) -> RoundRecord | None:
    """The owner's last round that called the model, when it asked `digest` and stayed silent.

    None when that round is `max_silence` old or older (or dated after `at`), ended any other way
    than `no_push` (a push the gate held back may pass now), or asked something else.

    Raises:
        StoreError: the round log cannot be read.
    """
    last = await rounds.last_asked(owner_id, at - max_silence)
    if last is None or last.digest != digest:
        return None
    # A round dated after `at` (the clock was set back) counts as old: it must
    # not silence heartbeats past max_silence.
    if not timedelta(0) <= at - last.started_at < max_silence:
        return None
    if last.outcome is not Outcome.SUPPRESSED or last.reason != Reason.NO_PUSH:
        return None
    return last


class UnchangedBeats:
    """The digests a round keeps, and the skip of a heartbeat that would ask again.

    `rounds` is the round log heartbeats are judged by; without it every heartbeat asks.
    """

    def __init__(
        self, settings: Settings, *, memories: MemoryStore | None, rounds: RoundStore | None
    ) -> None:
        self._settings = settings
        self._memories = memories
        self._rounds = rounds

    def digest(self, request: Request, at: datetime) -> str:
        """The digest of `request`, built at `at`."""
        s = self._settings
        return beat_digest(request, at=at, tz=s.owner.tz, quiet=s.gate.quiet_hours)

    async def silent_digest(self, request: Request, owner_id: str, at: datetime) -> str:
        """What the next heartbeat will ask if nothing happens but this silent round."""
        return await next_beat_digest(
            request, memories=self._memories, settings=self._settings, owner_id=owner_id, at=at
        )

    async def same_as_before(
        self, digest: str, trigger: str, owner_id: str, at: datetime
    ) -> RoundRecord | None:
        """The silent round a heartbeat asking `digest` would ask again, or None: it asks.

        Raises:
            StoreError: the round log cannot be read.
        """
        schedule = self._settings.schedule
        if self._rounds is None or not schedule.skip_unchanged or asks_every_time(trigger):
            return None
        return await same_silent_round(
            self._rounds, owner_id, digest, at=at, max_silence=schedule.max_silence
        )
