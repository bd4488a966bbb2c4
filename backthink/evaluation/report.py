"""The `eval --json` object: the figures overall, per language, per tag, beside the baselines.

Every group of runs (all of them, one language's, one tag's) has the same
shape: the delivered figures at its top level (the names a script reads),
`kappa` of the model's decision, `figures` with the `model` and `delivered`
views side by side, and `baselines`, the delivered figures of the scorers that
ask no model (`never` pushes nothing, `always` pushes a fixed routine line),
run through the same gate on the same scenarios. Days are counted apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from backthink.evaluation.figures import DayRun, RunResult, day_rates, percentile, rates

Baselines = Mapping[str, Sequence[RunResult]]
DayBaselines = Mapping[str, Sequence[DayRun]]


def group(results: Sequence[RunResult], baselines: Baselines) -> dict[str, Any]:
    """The figures of one group of runs and of the baselines on the same scenarios."""
    delivered = rates(results)
    model = rates(results, "model")
    top = {key: value for key, value in delivered.items() if key != "kappa"}
    return {
        "scenarios": len({r.id for r in results}),
        **top,
        "kappa": model["kappa"],
        "figures": {"model": model, "delivered": delivered},
        "baselines": {name: rates(runs) for name, runs in baselines.items()},
    }


def _split(
    results: Sequence[RunResult], baselines: Baselines, keys: Callable[[RunResult], Sequence[str]]
) -> dict[str, Any]:
    """Groups by a key of each run (a run may fall under several keys), sorted by key."""
    names = sorted({key for r in results for key in keys(r)})
    return {
        name: group(
            [r for r in results if name in keys(r)],
            {b: [r for r in runs if name in keys(r)] for b, runs in baselines.items()},
        )
        for name in names
    }


def day_group(days: Sequence[DayRun], baselines: DayBaselines) -> dict[str, Any]:
    """The day figures: delivered at the top, the model's beside them, and the baselines'."""
    delivered = day_rates(days)
    return {
        "days": len({d.id for d in days}),
        "day_precision": delivered["day_precision"],
        "day_recall": delivered["day_recall"],
        "over_budget": delivered["over_budget"],
        "day_figures": {"model": day_rates(days, "model"), "delivered": delivered},
        "day_baselines": {name: day_rates(runs) for name, runs in baselines.items()},
    }


def report(
    results: Sequence[RunResult],
    *,
    scenarios: int,
    model: str,
    output: str,
    invalid: Sequence[str] = (),
    baselines: Baselines | None = None,
    days: Sequence[DayRun] = (),
    day_baselines: DayBaselines | None = None,
) -> dict[str, Any]:
    """The whole `eval --json` object."""
    baselines = baselines or {}
    replies = [*results, *(beat for day in days for beat in day.beats)]
    latencies = [r.latency_ms for r in replies if r.replied and r.latency_ms is not None]
    prompt = sum(r.prompt_tokens or 0 for r in replies)
    completion = sum(r.completion_tokens or 0 for r in replies)
    return {
        **group(results, baselines),
        "scenarios": scenarios,
        "model": model,
        "output": output,
        "by_lang": _split(results, baselines, lambda r: (r.lang,)),
        "by_tag": _split(results, baselines, lambda r: r.tags),
        **day_group(days, day_baselines or {}),
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "latency_ms": {
            "mean": sum(latencies) / len(latencies) if latencies else None,
            "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies) if latencies else None,
        },
        "results": [r.to_json() for r in results],
        "day_results": [d.to_json() for d in days],
        "invalid": list(invalid),
    }
