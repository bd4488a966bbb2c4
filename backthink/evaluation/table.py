"""The human table of an evaluation: one row per scenario and per day, then the figures.

The figures read as "what your model adds": the model's own decision, what
the gate delivered, and the two baselines that ask no model, side by side;
then the same per language and per tag, and the days.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backthink.evaluation.figures import RATES, DayRun, RunResult

COUNTS = ("runs", "replies", "pushes", "errors")
DAY_FIGURES = ("beats", "pushes", "day_precision", "day_recall", "false_alarm_rate", "over_budget")
# The columns of the per-language and per-tag rows.
GROUP_COLUMNS = (
    ("model", "push_precision", "prec"),
    ("model", "push_recall", "recall"),
    ("model", "false_alarm_rate", "false"),
    ("delivered", "push_precision", "prec"),
    ("delivered", "push_recall", "recall"),
    ("delivered", "false_alarm_rate", "false"),
    ("always", "push_recall", "recall"),
    ("always", "false_alarm_rate", "false"),
)


def verdict(runs: Sequence[RunResult]) -> str:
    """How a scenario's runs went, in a word: ok, missed, false alarm, or k/K right."""
    right = sum(1 for r in runs if r.push == r.expected_push)
    if right == len(runs):
        return "ok"
    if right == 0:
        return "missed" if runs[0].expected_push else "false alarm"
    return f"{right}/{len(runs)} right"


def day_verdict(day: DayRun) -> str:
    """How one run of a day went: ok, over budget, or how many beats went wrong."""
    if day.pushes() > day.max_pushes:
        return "over budget"
    wrong = sum(1 for beat in day.beats if beat.push != beat.expected_push)
    return "ok" if wrong == 0 else f"{wrong} beat{'s' if wrong != 1 else ''} wrong"


def render_table(data: dict[str, Any], results: Sequence[RunResult], days: Sequence[DayRun]) -> str:
    """The whole table, scenarios first, figures last."""
    repeat = _repeat(results, days)
    lines = [
        f"{data['scenarios']} scenarios, {data['days']} days, x {repeat} "
        f"run{'s' if repeat != 1 else ''}, model {data['model']}, output {data['output']}",
    ]
    if results:
        lines += ["", *_scenario_rows(results), "", *_figure_rows(data)]
        lines += ["", *_group_rows("language", data["by_lang"])]
        if data["by_tag"]:
            lines += ["", *_group_rows("tag", data["by_tag"])]
    if days:
        lines += ["", *_day_rows(days), "", *_day_figure_rows(data)]
    tokens, latency = data["tokens"], data["latency_ms"]
    lines.append("")
    lines.append(
        f"tokens: {tokens['prompt']} prompt + {tokens['completion']} completion; latency: "
        f"p50 {_ms(latency['p50'])}, p95 {_ms(latency['p95'])}, max {_ms(latency['max'])}"
    )
    return "\n".join(lines)


def _repeat(results: Sequence[RunResult], days: Sequence[DayRun]) -> int:
    runs = [r.run for r in results] + [d.run for d in days]
    return max(runs, default=0)


def _scenario_rows(results: Sequence[RunResult]) -> list[str]:
    grouped: dict[str, list[RunResult]] = {}
    for r in results:
        grouped.setdefault(r.id, []).append(r)
    width = max([len("scenario"), *(len(i) for i in grouped)])
    lines = [f"{'scenario':<{width}}  lang  expect    model  pushed  verdict       last outcome"]
    for sid, runs in grouped.items():
        last = runs[-1]
        expect = "push" if last.expected_push else "no_push"
        decided = [r for r in runs if r.model_push is not None]
        model = f"{sum(bool(r.model_push) for r in decided)}/{len(decided)}" if decided else "-"
        pushed = f"{sum(r.push for r in runs)}/{len(runs)}"
        lines.append(
            f"{sid:<{width}}  {last.lang:<4}  {expect:<8}  {model:<5}  {pushed:<6}  "
            f"{verdict(runs):<12}  {last.outcome}/{last.reason}"
        )
    return lines


def _columns(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    columns = [("model", data["figures"]["model"]), ("delivered", data["figures"]["delivered"])]
    return columns + list(data["baselines"].items())


def _figure_rows(data: dict[str, Any]) -> list[str]:
    columns = _columns(data)
    lines = [f"{'':<17}" + "".join(f"{name:>11}" for name, _ in columns)]
    for key in COUNTS:
        lines.append(f"{key:<17}" + "".join(f"{f[key]:>11}" for _, f in columns))
    for key in RATES:
        lines.append(f"{key:<17}" + "".join(f"{_percent(f[key]):>11}" for _, f in columns))
    lines.append(f"{'kappa':<17}" + "".join(f"{_kappa(f['kappa']):>11}" for _, f in columns))
    return lines


def _group_rows(title: str, groups: dict[str, Any]) -> list[str]:
    width = max([len(title), *(len(name) for name in groups)])
    head = f"{title:<{width}}  {'n':>4}  {'kappa':>6}"
    views = f"{'':<{width}}  {'':>4}  {'':>6}"
    for view, _, label in GROUP_COLUMNS:
        head += f"  {label:>6}"
        views += f"  {view[:6]:>6}"
    lines = [views, head]
    for name, group in groups.items():
        row = f"{name:<{width}}  {group['runs']:>4}  {_kappa(group['kappa']):>6}"
        for view, key, _ in GROUP_COLUMNS:
            figures = group["figures"].get(view) or group["baselines"].get(view) or {}
            row += f"  {_percent(figures.get(key)):>6}"
        lines.append(row)
    return lines


def _day_rows(days: Sequence[DayRun]) -> list[str]:
    width = max([len("day"), *(len(d.id) for d in days)])
    lines = [f"{'day':<{width}}  lang  beats  expect  model  pushed  max  verdict"]
    for day in days:
        expected = sum(1 for b in day.beats if b.expected_push)
        lines.append(
            f"{day.id:<{width}}  {day.lang:<4}  {len(day.beats):>5}  {expected:>6}  "
            f"{day.pushes('model'):>5}  {day.pushes():>6}  {day.max_pushes:>3}  {day_verdict(day)}"
        )
    return lines


def _day_figure_rows(data: dict[str, Any]) -> list[str]:
    columns = [*data["day_figures"].items(), *data["day_baselines"].items()]
    lines = [f"{'':<17}" + "".join(f"{name:>11}" for name, _ in columns)]
    for key in DAY_FIGURES:
        cells = [f[key] if isinstance(f[key], int) else _percent(f[key]) for _, f in columns]
        lines.append(f"{key:<17}" + "".join(f"{cell:>11}" for cell in cells))
    lines.append(f"{'kappa':<17}" + "".join(f"{_kappa(f['kappa']):>11}" for _, f in columns))
    return lines


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _kappa(value: float | None) -> str:
    # Adding 0.0 turns the -0.0 that rounding a tiny negative gives into 0.0.
    return "-" if value is None else f"{round(value, 2) + 0.0:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
