"""The live tier's own invariant checks, on fixed replies: they run in the default suite."""

from __future__ import annotations

from datetime import UTC, datetime

from backthink.models import Outcome, Urgency
from backthink.records import RoundRecord

from .live_helpers import _reply_invariants

AT = datetime(2026, 11, 30, 6, tzinfo=UTC)
ECHO = "[decision:push]\nTrigger: process start: you just came back from a restart"


def record(**fields: object) -> RoundRecord:
    values: dict[str, object] = {
        "id": "r1",
        "owner_id": "o",
        "trigger": "startup",
        "started_at": AT,
        "finished_at": AT,
        "outcome": Outcome.SUPPRESSED,
        "reason": "parse_failed",
        "push": False,
        "urgency": Urgency.ROUTINE,
        "raw_reply": ECHO,
    }
    values.update(fields)
    return RoundRecord.model_validate(values)


def test_a_push_refused_as_an_echo_keeps_the_invariants() -> None:
    """A parsed push the round refused for echoing the prompt is not a changed decision."""
    assert _reply_invariants(ECHO, record(notes=["echoed_prompt"]), None) == []


def test_a_decision_changed_without_a_refusal_is_reported() -> None:
    """The same record without the refusal noted is a decision that did not come from the reply."""
    assert _reply_invariants(ECHO, record(), None) == [
        "the recorded decision differs from parse_footer(raw_reply)"
    ]


def test_raised_urgency_and_a_foreign_body_are_reported() -> None:
    """Urgency above the reply's token and a delivered text from before the footer are caught."""
    raw = "thinking about it\n[decision:push]\nLunch time!"
    pushed = record(
        outcome=Outcome.DELIVERED,
        reason="web",
        push=True,
        urgency=Urgency.CRITICAL,
        body="thinking about it",
        raw_reply=raw,
    )
    problems = _reply_invariants(raw, pushed, "thinking about it")
    assert "urgency critical without a token for it" in problems
    assert "the delivered text is not taken from after the footer" in problems
