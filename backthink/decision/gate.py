"""The push gate: pure decisions over a decision, a state snapshot, history and a time.

Nothing here reads a clock or a database. The round gathers the facts
(`GateHistory`) and passes `at=`; the same inputs always give the same verdict,
so every rule is pinned down by a table of explicit times.

Order of the cascade: the model's decision, then disturbance (urgency against
availability and quiet hours), the activity gate, rate limits, unanswered
backoff, duplicate suppression, and finally the choice of exactly one channel.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from backthink.config import GateSettings
from backthink.decision.quiet import in_quiet_hours
from backthink.models import (
    Availability,
    Decision,
    Outcome,
    PastPush,
    Reason,
    RoundState,
    Urgency,
    credible,
)

_SPACE_OR_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
FUTURE_OWNER_MESSAGE_NOTE = "the owner's last message is dated in the future; it is ignored"


@dataclass(frozen=True)
class GateHistory:
    """What the gate needs to know about the past, gathered by the round.

    Attributes:
        last_owner_message_at: when the owner last wrote, if ever.
        owner_channels: channels of the owner's recent messages, newest first
            (None means the main session's web interface).
        pushes: proactive messages delivered recently, newest first.
    """

    last_owner_message_at: datetime | None = None
    owner_channels: Sequence[str | None] = ()
    pushes: Sequence[PastPush] = ()


@dataclass(frozen=True)
class Verdict:
    """How a round ends, or (for `deliver`) where its message goes."""

    outcome: Outcome
    reason: str
    channel: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    fallbacks: tuple[str, ...] = ()
    """For a delivery: the next candidates in order, should `channel` fail all its tries."""

    @property
    def deliver(self) -> bool:
        """True when the message may be sent to `channel`."""
        return self.outcome is Outcome.DELIVERED


def owner_active(last_owner_message_at: datetime | None, window: timedelta, at: datetime) -> bool:
    """The owner wrote within `window` before `at`: a conversation is going on.

    A message dated later than `at` plus `FUTURE_SKEW` was mis-dated (a wrong
    clock or import), not written now; counting it would silence every round
    until that date, so it is no activity.
    """
    last = _credible(last_owner_message_at, at)
    return last is not None and at - last < window


def _credible(last_owner_message_at: datetime | None, at: datetime) -> datetime | None:
    """The owner's last message time, or None when it lies beyond the clock skew after `at`."""
    if last_owner_message_at is None or not credible(last_owner_message_at, at):
        return None
    return last_owner_message_at


def pre_gate(
    *,
    settings: GateSettings,
    tz: ZoneInfo,
    connected: Sequence[str],
    last_owner_message_at: datetime | None,
    at: datetime,
    owner_channels: Sequence[str | None] = (),
    session_channel: str | None = None,
) -> Verdict | None:
    """Cheap checks before any model call; a verdict means "skip this round".

    A push the model leaves to `auto` must have somewhere to go: one of the
    owner's recent channels (`owner_channels`, newest first), the default
    channel or the session channel, connected now; otherwise the round is
    decided before it spends a token. Single flight is the caller's job (it
    needs a lock, not data).
    """
    routes, _ = channel_candidates(
        None,
        owner_channels=owner_channels,
        connected=connected,
        default_channel=settings.default_channel,
        session_channel=session_channel,
    )
    if not routes:
        return Verdict(Outcome.SKIPPED, Reason.NO_ROUTE)
    if owner_active(last_owner_message_at, settings.activity_window, at):
        return Verdict(Outcome.SKIPPED, Reason.OWNER_ACTIVE)
    if settings.quiet_mode == "skip" and in_quiet_hours(at, settings.quiet_hours, tz):
        return Verdict(Outcome.SKIPPED, Reason.QUIET_HOURS)
    return None


def disturbance(urgency: Urgency, state: RoundState | None, *, quiet: bool) -> Reason | None:
    """The disturbance cascade: the reason a message of this urgency may not disturb now.

    routine needs the owner available; warning also passes when busy; only
    critical breaks quiet hours and dnd. With availability unknown, quiet hours
    alone decide.
    """
    if urgency is Urgency.CRITICAL:
        return None
    if quiet:
        return Reason.QUIET_HOURS
    availability = state.availability if state is not None else None
    if availability is Availability.DND:
        return Reason.UNAVAILABLE
    if availability is Availability.BUSY and urgency is Urgency.ROUTINE:
        return Reason.UNAVAILABLE
    return None


@lru_cache(maxsize=1024)
def normalize_body(text: str) -> str:
    """A body's identity for duplicate checks: case, width, spaces and punctuation ignored.

    Cached: every round of an owner compares against the same recent pushes.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    # A body of only emoji or punctuation keeps its own text, so "😊" and "!!!" differ.
    return _SPACE_OR_PUNCT.sub("", folded) or folded.strip()


def channel_candidates(
    named: str | None,
    *,
    owner_channels: Sequence[str | None],
    connected: Sequence[str],
    default_channel: str | None,
    session_channel: str | None,
) -> tuple[list[str], tuple[str, ...]]:
    """Every connected channel a message may go to, best first; also say why a wish was ignored.

    The named channel comes first when it is connected; then the channels of the
    owner's most recent messages among connected ones, newest first (a message
    stored without a channel was said in the main session: it counts as
    `session_channel`, the configured channel of type web, when there is one);
    then the default channel when connected. Unset, the default is the session
    channel, and after it every other connected channel in configuration order:
    a push reaches the owner wherever they can be reached now. Each name
    appears once; a round still uses exactly one of them.
    """
    notes: list[str] = []
    found: list[str] = []

    def add(name: str | None) -> None:
        if name is not None and name in connected and name not in found:
            found.append(name)

    if named is not None:
        if named not in connected:
            notes.append(f"named channel {named!r} is not connected")
        add(named)
    for channel in owner_channels:
        add(channel or session_channel)
    if default_channel is not None:
        add(default_channel)
    else:
        add(session_channel)
        for name in connected:
            add(name)
    return found, tuple(notes)


def choose_channel(
    named: str | None,
    *,
    owner_channels: Sequence[str | None],
    connected: Sequence[str],
    default_channel: str | None,
    session_channel: str | None,
) -> tuple[str | None, tuple[str, ...]]:
    """Pick exactly one channel, or None for no route: the first of `channel_candidates`."""
    found, notes = channel_candidates(
        named,
        owner_channels=owner_channels,
        connected=connected,
        default_channel=default_channel,
        session_channel=session_channel,
    )
    return (found[0] if found else None), notes


def evaluate(
    decision: Decision,
    *,
    state: RoundState | None,
    history: GateHistory,
    connected: Sequence[str],
    session_channel: str | None,
    settings: GateSettings,
    tz: ZoneInfo,
    started_at: datetime,
    at: datetime,
) -> Verdict:
    """Decide whether a parsed push reaches the owner now, and where.

    Args:
        decision: the parsed footer; it must be a push.
        state: the round's state snapshot (None when unknown).
        history: the owner's recent activity and pushes, newest first.
        connected: names of the channels that can deliver now.
        session_channel: the main session's own channel (type web), if configured.
        settings: the gate settings.
        tz: the owner's time zone (quiet hours, the daily cap's day).
        started_at: when the round started (an owner message after it means
            the owner came back while the model was thinking).
        at: the instant of the decision.
    """
    if not decision.push:
        raise ValueError("evaluate() takes push decisions only")
    urgency = decision.urgency
    blocked = disturbance(urgency, state, quiet=in_quiet_hours(at, settings.quiet_hours, tz))
    if blocked is not None:
        return Verdict(Outcome.SUPPRESSED, blocked)

    last = _credible(history.last_owner_message_at, at)
    # A mis-dated message is neither activity nor an answer; the record says it was ignored.
    skew_notes: tuple[str, ...] = (
        () if last == history.last_owner_message_at else (FUTURE_OWNER_MESSAGE_NOTE,)
    )
    if last is not None and (last > started_at or owner_active(last, settings.activity_window, at)):
        return Verdict(Outcome.SUPPRESSED, Reason.OWNER_ACTIVE)

    pushes = sorted(history.pushes, key=lambda p: p.at, reverse=True)
    if pushes and urgency is not Urgency.CRITICAL and at - pushes[0].at < settings.min_interval:
        return Verdict(Outcome.SUPPRESSED, Reason.MIN_INTERVAL, notes=skew_notes)
    day_start = _local_midnight(at, tz)
    if sum(1 for p in pushes if p.at >= day_start) >= settings.daily_cap:
        return Verdict(Outcome.SUPPRESSED, Reason.DAILY_CAP, notes=skew_notes)

    unanswered = sum(1 for p in pushes if last is None or p.at > last)
    if unanswered >= settings.max_unanswered and urgency is not Urgency.CRITICAL:
        return Verdict(Outcome.SUPPRESSED, Reason.UNANSWERED, notes=skew_notes)

    key = normalize_body(decision.body)
    horizon = at - settings.duplicate_window
    if any(p.at >= horizon and normalize_body(p.body) == key for p in pushes):
        return Verdict(Outcome.SUPPRESSED, Reason.DUPLICATE, notes=skew_notes)

    found, notes = channel_candidates(
        decision.channel,
        owner_channels=history.owner_channels,
        connected=connected,
        default_channel=settings.default_channel,
        session_channel=session_channel,
    )
    if not found:
        return Verdict(Outcome.SUPPRESSED, Reason.NO_ROUTE, notes=skew_notes + notes)
    channel, *fallbacks = found
    return Verdict(
        Outcome.DELIVERED,
        channel,
        channel=channel,
        notes=skew_notes + notes,
        fallbacks=tuple(fallbacks),
    )


def _local_midnight(at: datetime, tz: ZoneInfo) -> datetime:
    """The start of the owner's local day containing `at`, as an aware instant."""
    local = at.astimezone(tz)
    return datetime.combine(local.date(), time(0), tzinfo=tz)
