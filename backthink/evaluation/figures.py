"""The figures of an evaluation: pure arithmetic over the runs' results.

A run is one round of one scenario. Each run is judged twice: by what the
model decided before any gate (`model`), and by what the gate delivered
(`delivered`): a routine push at 3 a.m. that quiet hours held back is the
model's push but no delivered one. Every rate is a fraction in 0..1, or None
when it has nothing to be a fraction of (no run expected a push, no reply
came back).

- parse_rate: replies whose decision could be read, among the runs that got a
  reply (a run the pre-gate skipped asked no model, and a failed call has none);
- push_precision: runs expected to push, among the runs that pushed;
- push_recall: runs that pushed, among the runs expected to push;
- false_alarm_rate: runs that pushed, among the runs expected to stay silent;
- critical_recall: runs pushed at critical urgency, among the runs whose
  scenario expects a critical push;
- on_point_rate: among the right pushes, those that also carry at least the
  expected urgency and mention one of the expected words;
- kappa: Cohen's kappa of the pushes against the expected ones, agreement
  beyond what chance gives at the same push rates.

The model view leaves out the runs where no model decided (the pre-gate
skipped the round, the call failed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from backthink.models import Urgency

_RANK = {Urgency.ROUTINE: 0, Urgency.WARNING: 1, Urgency.CRITICAL: 2}
RATES = (
    "parse_rate",
    "push_precision",
    "push_recall",
    "false_alarm_rate",
    "critical_recall",
    "on_point_rate",
)
View = Literal["model", "delivered"]


@dataclass(frozen=True)
class RunResult:
    """One run of one scenario (or one beat of a day), as scored."""

    id: str
    lang: str
    run: int
    expected_push: bool
    push: bool
    """Whether the gate delivered a push."""
    outcome: str
    reason: str
    expected_urgency: Urgency | None = None
    mentions: tuple[str, ...] = ()
    urgency: Urgency | None = None
    """The urgency of the round's decision, when one was read."""
    body: str | None = None
    model_push: bool | None = None
    """The model's own decision before the gate; None when no model decided."""
    model_urgency: Urgency | None = None
    model_body: str | None = None
    replied: bool = False
    parsed: bool | None = None
    """Whether the reply's decision could be read; None without a reply."""
    problems: list[str] = field(default_factory=list)
    tags: tuple[str, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None

    def pushed(self, view: View) -> bool:
        """Whether this run pushed, as the model decided or as the gate delivered."""
        return bool(self.model_push) if view == "model" else self.push

    def right_push(self, view: View = "delivered") -> bool:
        """Pushed, and the scenario expects a push."""
        return self.pushed(view) and self.expected_push

    def on_point(self, view: View = "delivered") -> bool:
        """A right push with at least the expected urgency and one of the expected words."""
        if not self.right_push(view):
            return False
        urgency = self.model_urgency if view == "model" else self.urgency
        if self.expected_urgency is not None:
            got = _RANK[urgency] if urgency is not None else 0
            if got < _RANK[self.expected_urgency]:
                return False
        if self.mentions:
            body = ((self.model_body if view == "model" else self.body) or "").casefold()
            return any(word.casefold() in body for word in self.mentions)
        return True

    def critical(self, view: View) -> bool:
        """Pushed at critical urgency."""
        urgency = self.model_urgency if view == "model" else self.urgency
        return self.pushed(view) and urgency is Urgency.CRITICAL

    def to_json(self) -> dict[str, Any]:
        """One entry of the report's `results`."""
        return {
            "id": self.id,
            "lang": self.lang,
            "run": self.run,
            "push": self.push,
            "expected_push": self.expected_push,
            "model_push": self.model_push,
            "model_urgency": _value(self.model_urgency),
            "outcome": self.outcome,
            "reason": self.reason,
            "urgency": _value(self.urgency),
            "expected_urgency": _value(self.expected_urgency),
            "on_point": self.on_point() if self.right_push() else None,
            "parsed": self.parsed,
            "problems": self.problems,
            "body": self.body,
            "tags": list(self.tags),
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "latency_ms": self.latency_ms,
        }


def _value(urgency: Urgency | None) -> str | None:
    return urgency.value if urgency is not None else None


def ratio(part: int, whole: int) -> float | None:
    """`part / whole`, or None when there is nothing to divide."""
    return part / whole if whole else None


def kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of (decided, expected) pairs; None without pairs or when chance agrees fully.

    `(p_o - p_e) / (1 - p_e)`: `p_o` the share of pairs that agree, `p_e` the
    agreement two independent raters with the same push rates would reach.
    """
    if not pairs:
        return None
    n = len(pairs)
    agree = sum(1 for decided, expected in pairs if decided == expected) / n
    decided = sum(1 for d, _ in pairs if d) / n
    expected = sum(1 for _, e in pairs if e) / n
    chance = decided * expected + (1 - decided) * (1 - expected)
    if math.isclose(chance, 1.0):
        return None
    return (agree - chance) / (1 - chance)


def rates(results: Sequence[RunResult], view: View = "delivered") -> dict[str, Any]:
    """The counts and rates of a set of runs, as the model decided or as the gate delivered."""
    if view == "model":
        results = [r for r in results if r.model_push is not None]
    replied = [r for r in results if r.replied]
    pushed = [r for r in results if r.pushed(view)]
    expected = [r for r in results if r.expected_push]
    silent = [r for r in results if not r.expected_push]
    right = [r for r in pushed if r.expected_push]
    critical = [r for r in results if r.expected_urgency is Urgency.CRITICAL]
    return {
        "runs": len(results),
        "replies": len(replied),
        "errors": sum(1 for r in results if r.outcome == "failed"),
        "pushes": len(pushed),
        "parse_rate": ratio(sum(1 for r in replied if r.parsed), len(replied)),
        "push_precision": ratio(len(right), len(pushed)),
        "push_recall": ratio(len(right), len(expected)),
        "false_alarm_rate": ratio(sum(1 for r in silent if r.pushed(view)), len(silent)),
        "critical_recall": ratio(sum(1 for r in critical if r.critical(view)), len(critical)),
        "on_point_rate": ratio(sum(1 for r in right if r.on_point(view)), len(right)),
        "kappa": kappa([(r.pushed(view), r.expected_push) for r in results]),
    }


@dataclass(frozen=True)
class DayRun:
    """One run of one day: its beats in order, and the most pushes it should deliver."""

    id: str
    lang: str
    run: int
    max_pushes: int
    beats: list[RunResult]
    tags: tuple[str, ...] = ()

    def pushes(self, view: View = "delivered") -> int:
        """How many beats pushed, as decided or as delivered."""
        return sum(1 for beat in self.beats if beat.pushed(view))

    def to_json(self) -> dict[str, Any]:
        """One entry of the report's `day_results`."""
        return {
            "id": self.id,
            "lang": self.lang,
            "run": self.run,
            "max_pushes": self.max_pushes,
            "pushes": self.pushes(),
            "model_pushes": self.pushes("model"),
            "over_budget": self.pushes() > self.max_pushes,
            "beats": [beat.to_json() for beat in self.beats],
        }


def day_rates(days: Sequence[DayRun], view: View = "delivered") -> dict[str, Any]:
    """Day figures over every beat of every day run: precision, recall and days over budget."""
    beats = [beat for day in days for beat in day.beats]
    figures = rates(beats, view)
    return {
        "days": len(days),
        "beats": figures["runs"],
        "pushes": figures["pushes"],
        "day_precision": figures["push_precision"],
        "day_recall": figures["push_recall"],
        "false_alarm_rate": figures["false_alarm_rate"],
        "critical_recall": figures["critical_recall"],
        "over_budget": sum(1 for day in days if day.pushes(view) > day.max_pushes),
        "kappa": figures["kappa"],
    }


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` in 0..1) of `values`, or None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]
