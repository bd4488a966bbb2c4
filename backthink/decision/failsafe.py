"""The fail-safe rules every reading of a reply shares, and the problem codes they record.

A reply reaches the gate as a Decision. Whatever way it was written (the
footer, or one JSON object), the same rule decides whether a push is still a
push: it needs a deliverable body, not empty and not longer than the gate
allows. Anything unclear has already fallen back to "no push" by then, and
`suppression_reason` names why in the round's reason code.
"""

from __future__ import annotations

from typing import Final

from backthink.models import Decision, Reason

# Problem codes recorded in Decision.problems; they are stable and end up in round records.
NO_DECISION: Final = "no_decision"
CONFLICTING_DECISIONS: Final = "conflicting_decisions"
EMPTY_REPLY: Final = "empty_reply"
NOTHING_TO_SAY: Final = "nothing_to_say"
EMPTY_BODY: Final = "empty_body"
BODY_TOO_LONG: Final = "body_too_long"
URGENCY_UNCLEAR: Final = "urgency_unclear"
CHANNEL_UNCLEAR: Final = "channel_unclear"
UNCLOSED_THINK: Final = "unclosed_think"
ECHOED_FOOTER: Final = "echoed_footer"
ECHOED_PROMPT: Final = "echoed_prompt"
# A reply asked for as one JSON object (model.output = "json_schema") that is not one.
INVALID_JSON: Final = "invalid_json"
NOT_AN_OBJECT: Final = "not_an_object"
MISSING_FIELD: Final = "missing_field"
UNKNOWN_FIELD: Final = "unknown_field"
DUPLICATE_FIELD: Final = "duplicate_field"
WRONG_TYPE: Final = "wrong_type"

# Problems that mean the decision itself could not be read.
UNREADABLE: Final = frozenset(
    {
        NO_DECISION,
        CONFLICTING_DECISIONS,
        EMPTY_REPLY,
        INVALID_JSON,
        NOT_AN_OBJECT,
        MISSING_FIELD,
        UNKNOWN_FIELD,
        DUPLICATE_FIELD,
        WRONG_TYPE,
    }
)
# Reason codes of a suppressed round, as listed in the design's outcome table.
_PARSE_FAILURES: Final = UNREADABLE | {ECHOED_FOOTER, ECHOED_PROMPT}

DEFAULT_MAX_BODY_CHARS: Final = 600  # characters

# A reply that says "nothing to say" in one word, with or without punctuation around it.
_NOTHING: Final = frozenset({"", "无", "没有", "none", "nothing", "null", "n/a"})
_NOTHING_PUNCT: Final = " \t\n。.！!「」『』“”\"'`*"


def says_nothing(text: str) -> bool:
    """Whether a text is empty or only a one-word "nothing" (无, none, n/a)."""
    return text.strip(_NOTHING_PUNCT).strip().lower() in _NOTHING


def settle(
    wants_push: bool,
    body: str,
    problems: list[str],
    *,
    max_body_chars: int,
    **fields: object,
) -> Decision:
    """The decision a clearly read reply makes: a push only with a deliverable body.

    An explicit no_push carries no message, whatever text follows it.

    Args:
        wants_push: one clear push was written.
        body: the message as written, already stripped.
        problems: what was unclear so far (urgency, channel); extended here.
        max_body_chars: the longest body that may still be pushed.
        fields: the decision's other fields (channel, urgency).
    """
    if wants_push and says_nothing(body):
        problems.append(EMPTY_BODY)
    elif wants_push and len(body) > max_body_chars:
        problems.append(BODY_TOO_LONG)
    push = wants_push and not {EMPTY_BODY, BODY_TOO_LONG} & set(problems)
    return Decision.model_validate(
        {**fields, "push": push, "body": body if wants_push else "", "problems": problems}
    )


def suppression_reason(decision: Decision) -> Reason | None:
    """Map a non-push decision to the round's reason code.

    Returns:
        None for a push; `parse_failed`, `empty_body`, `body_too_long`, or
        `no_push` (the model chose not to speak) otherwise.
    """
    if decision.push:
        return None
    problems = set(decision.problems)
    if problems & _PARSE_FAILURES:
        return Reason.PARSE_FAILED
    if EMPTY_BODY in problems:
        return Reason.EMPTY_BODY
    if BODY_TOO_LONG in problems:
        return Reason.BODY_TOO_LONG
    return Reason.NO_PUSH
