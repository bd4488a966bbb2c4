"""The figures of an evaluation: pure arithmetic over the runs' results, and their table.

A run is one round of one scenario. `push` is what the gate delivered, not
what the model wanted: a routine push at 3 a.m. that quiet hours held back is
no push. Every rate is a fraction in 0..1, or None when it has nothing to be
a fraction of (no run expected a push, no reply came back).

- parse_rate: replies whose decision could be read, among the runs that got a
  reply (a run the pre-gate skipped asked no model, and a failed call has none);
- push_precision: runs expected to push, among the runs that pushed;
- push_recall: runs that pushed, among the runs expected to push;
- false_alarm_rate: runs that pushed, among the runs expected to stay silent;
- critical_recall: runs delivered at critical urgency, among the runs whose
  scenario expects a critical push;
- on_point_rate: among the right pushes, those that also carry at least the
  expected urgency and mention one of the expected words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class RunResult:
    """One run of one scenario, as scored."""

    id: str
    lang: str
    run: int
    expected_push: bool
    push: bool
    outcome: str
    reason: str
    expected_urgency: Urgency | None = None
    mentions: tuple[str, ...] = ()
    urgency: Urgency | None = None
    """The urgency the model decided on, when a decision was read."""
    body: str | None = None
    replied: bool = False
    parsed: bool | None = None
    """Whether the reply's decision could be read; None without a reply."""
    problems: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None

    @property
    def right_push(self) -> bool:
        """Pushed, and the scenario expects a push."""
        return self.push and self.expected_push

    @property
    def on_point(self) -> bool:
        """A right push with at least the expected urgency and one of the expected words."""
        if not self.right_push:
            return False
        if self.expected_urgency is not None:
            got = _RANK[self.urgency] if self.urgency is not None else 0
            if got < _RANK[self.expected_urgency]:
                return False
        if self.mentions:
            body = (self.body or "").casefold()
            return any(word.casefold() in body for word in self.mentions)
        return True

    def to_json(self) -> dict[str, Any]:
        """One entry of the report's `results`."""
        return {
            "id": self.id,
            "lang": self.lang,
            "run": self.run,
            "push": self.push,
            "expected_push": self.expected_push,
            "outcome": self.outcome,
            "reason": self.reason,
            "urgency": self.urgency.value if self.urgency is not None else None,
            "expected_urgency": (
                self.expected_urgency.value if self.expected_urgency is not None else None
            ),
            "on_point": self.on_point if self.right_push else None,
            "parsed": self.parsed,
            "problems": self.problems,
            "body": self.body,
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "latency_ms": self.latency_ms,
        }


def ratio(part: int, whole: int) -> float | None:
    """`part / whole`, or None when there is nothing to divide."""
    return part / whole if whole else None


def rates(results: Sequence[RunResult]) -> dict[str, Any]:
    """The counts and rates of a set of runs (all of them, or one language's)."""
    replied = [r for r in results if r.replied]
    pushed = [r for r in results if r.push]
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
        "false_alarm_rate": ratio(sum(1 for r in silent if r.push), len(silent)),
        "critical_recall": ratio(
            sum(1 for r in critical if r.push and r.urgency is Urgency.CRITICAL), len(critical)
        ),
        "on_point_rate": ratio(sum(1 for r in right if r.on_point), len(right)),
    }


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` in 0..1) of `values`, or None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def report(
    results: Sequence[RunResult],
    *,
    scenarios: int,
    model: str,
    output: str,
    invalid: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole `eval --json` object."""
    langs = sorted({r.lang for r in results})
    by_lang = {}
    for lang in langs:
        subset = [r for r in results if r.lang == lang]
        by_lang[lang] = {"scenarios": len({r.id for r in subset}), **rates(subset)}
    latencies = [r.latency_ms for r in results if r.replied and r.latency_ms is not None]
    prompt = sum(r.prompt_tokens or 0 for r in results)
    completion = sum(r.completion_tokens or 0 for r in results)
    return {
        "scenarios": scenarios,
        **rates(results),
        "model": model,
        "output": output,
        "by_lang": by_lang,
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "latency_ms": {
            "mean": sum(latencies) / len(latencies) if latencies else None,
            "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies) if latencies else None,
        },
        "results": [r.to_json() for r in results],
        "invalid": list(invalid),
    }


def verdict(runs: Sequence[RunResult]) -> str:
    """How a scenario's runs went, in a word: ok, missed, false alarm, or k/K right."""
    right = sum(1 for r in runs if r.push == r.expected_push)
    if right == len(runs):
        return "ok"
    if right == 0:
        return "missed" if runs[0].expected_push else "false alarm"
    return f"{right}/{len(runs)} right"


def render_table(data: dict[str, Any], results: Sequence[RunResult]) -> str:
    """The human table: one row per scenario, then the figures overall and per language."""
    order: list[str] = []
    grouped: dict[str, list[RunResult]] = {}
    for r in results:
        if r.id not in grouped:
            order.append(r.id)
        grouped.setdefault(r.id, []).append(r)
    width = max([len("scenario"), *(len(i) for i in order)])
    repeat = len(results) // len(order) if order else 0
    lines = [
        f"{data['scenarios']} scenarios x {repeat} run{'s' if repeat != 1 else ''}, "
        f"model {data['model']}, output {data['output']}",
        "",
        f"{'scenario':<{width}}  lang  expect     pushed  verdict       last outcome",
    ]
    for sid in order:
        runs = grouped[sid]
        last = runs[-1]
        expect = "push" if last.expected_push else "no_push"
        pushed = f"{sum(r.push for r in runs)}/{len(runs)}"
        lines.append(
            f"{sid:<{width}}  {last.lang:<4}  {expect:<9}  {pushed:<6}  {verdict(runs):<12}  "
            f"{last.outcome}/{last.reason}"
        )
    columns = ["all", *data["by_lang"]]
    figures = [data, *data["by_lang"].values()]
    lines += ["", f"{'':<17}" + "".join(f"{c:>9}" for c in columns)]
    for key in ("runs", "replies", "pushes", "errors"):
        lines.append(f"{key:<17}" + "".join(f"{f[key]:>9}" for f in figures))
    for key in RATES:
        lines.append(f"{key:<17}" + "".join(f"{_percent(f[key]):>9}" for f in figures))
    tokens, latency = data["tokens"], data["latency_ms"]
    lines.append("")
    lines.append(
        f"tokens: {tokens['prompt']} prompt + {tokens['completion']} completion; latency: "
        f"p50 {_ms(latency['p50'])}, p95 {_ms(latency['p95'])}, max {_ms(latency['max'])}"
    )
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
