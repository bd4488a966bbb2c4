"""Escaping and the page's words: all outside text goes through `esc`; each reason has a sentence.

Replies, messages, memories and triggers are untrusted text: a model may
write `<script>`, an owner may paste HTML. The pages are built from strings,
and each interpolated value passes through `esc` (quotes included, so a value
is safe inside an attribute too).
"""

from __future__ import annotations

import html
from datetime import datetime
from zoneinfo import ZoneInfo

from backthink.models import Outcome, Reason


def esc(value: object) -> str:
    """The value as HTML text, safe in element content and in quoted attributes."""
    return html.escape("" if value is None else str(value), quote=True)


# What each reason code means, in words a reader of the page understands at once.
# Keyed by (outcome, reason) where one code means different things per outcome.
_WORDS: dict[str, str] = {
    Reason.BUSY: "another round for this owner was still running, so this one did not start",
    Reason.OWNER_ACTIVE: "the owner was writing just then; a companion does not interrupt",
    Reason.NO_ROUTE: "no connected channel could carry a message",
    Reason.DISABLED: "rounds are paused (backthink pause, or the page's pause button)",
    Reason.NO_MODEL: "no model endpoint is configured, so nothing was asked or spent",
    Reason.NO_PUSH: "the model decided it had nothing to say",
    Reason.UNCHANGED: "nothing was new since the last silent round, so the model was not asked",
    Reason.PARSE_FAILED: "the reply had no clear decision footer, so nothing was sent",
    Reason.EMPTY_BODY: "the model decided to push but wrote no message",
    Reason.BODY_TOO_LONG: "the message was longer than gate.max_body_chars",
    Reason.UNAVAILABLE: "the owner was busy or on do-not-disturb, and the urgency was too low",
    Reason.MIN_INTERVAL: "too soon after the last message (gate.min_interval)",
    Reason.DAILY_CAP: "today's messages already reached gate.daily_cap",
    Reason.UNANSWERED: "earlier messages went unanswered; only a critical one may pass now",
    Reason.DUPLICATE: "the same message was already sent within gate.duplicate_window",
    Reason.TOOL_LIMIT: "the model still asked for tools after its last allowed turn",
    Reason.MODEL_ERROR: "the model endpoint failed or answered with nothing usable",
    Reason.MODEL_TIMEOUT: "the model endpoint did not answer in time",
    Reason.DELIVERY_FAILED: "every channel tried refused the message",
    Reason.STORE_ERROR: "the database could not be read or written",
    Reason.INTERRUPTED: "a shutdown cut the round off before it ended",
    Reason.INTERNAL_ERROR: "a bug in backthink (the log has the traceback)",
}
_QUIET = {
    Outcome.SKIPPED: "quiet hours, in skip mode: no model call at all",
    Outcome.SUPPRESSED: "quiet hours: only a critical message may break them",
}


def reason_words(outcome: Outcome, reason: str) -> str:
    """One sentence saying why a round ended as it did."""
    if outcome is Outcome.DELIVERED:
        return f"the gate let it through and the message went out on {reason}"
    if reason == Reason.QUIET_HOURS:
        return _QUIET.get(outcome, "quiet hours")
    if outcome is Outcome.SKIPPED and reason == Reason.NO_ROUTE:
        return "no channel could carry a message now, so the model was not asked at all"
    return _WORDS.get(reason, "no explanation known for this reason code")


def local_time(at: datetime, tz: ZoneInfo, fmt: str = "%H:%M") -> str:
    """A time as the owner's clock shows it."""
    return at.astimezone(tz).strftime(fmt)
