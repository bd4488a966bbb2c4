"""Two saved `eval --json` runs side by side: their figures, the differences, what changed.

Two models, two prompts, the footer against json_schema: run the same set
twice, save each `--json`, and compare. Rates differ in percentage points,
kappa and counts in plain numbers. A run saved before a figure existed shows
it as missing ("-"), never as zero.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backthink.errors import InputError
from backthink.evaluation.figures import RATES

VIEWS = ("model", "delivered")
DAY_KEYS = ("day_precision", "day_recall", "over_budget")
GROUP_KEYS = ("push_recall", "false_alarm_rate")
LABEL = 30  # characters of the first column: a tag and what is counted


def load_run(path: Path) -> dict[str, Any]:
    """A saved `eval --json` object.

    Raises:
        InputError: the file cannot be read or is not such an object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a saved `eval --json` run ({exc})") from None
    if not isinstance(data, dict) or "results" not in data:
        raise InputError(f"{path}: not a saved `eval --json` run (no results)")
    return data


def _figures(data: dict[str, Any], view: str) -> dict[str, Any]:
    figures = data.get("figures")
    if isinstance(figures, dict):
        chosen = figures.get(view)
        if isinstance(chosen, dict):
            return chosen
    # A run saved before the model view existed has its delivered figures at the top.
    return data if view == "delivered" else {}


def _day_model(data: dict[str, Any]) -> dict[str, Any]:
    figures = data.get("day_figures")
    chosen = figures.get("model") if isinstance(figures, dict) else None
    return chosen if isinstance(chosen, dict) else {}


def _diff(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return b - a
    return None


def _entry(a: Any, b: Any) -> dict[str, Any]:
    return {"a": a, "b": b, "diff": _diff(a, b)}


def _right(data: dict[str, Any]) -> dict[str, bool]:
    """Per scenario: whether most of its runs were delivered as expected."""
    tally: dict[str, list[int]] = {}
    for result in data.get("results") or []:
        counts = tally.setdefault(str(result.get("id")), [0, 0])
        counts[0] += result.get("push") == result.get("expected_push")
        counts[1] += 1
    return {sid: right * 2 > runs for sid, (right, runs) in tally.items()}


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The comparison of two runs as data (`eval --compare --json`)."""
    out: dict[str, Any] = {
        "a": {key: a.get(key) for key in ("model", "output", "scenarios", "runs", "days")},
        "b": {key: b.get(key) for key in ("model", "output", "scenarios", "runs", "days")},
    }
    for view in VIEWS:
        fa, fb = _figures(a, view), _figures(b, view)
        out[view] = {key: _entry(fa.get(key), fb.get(key)) for key in (*RATES, "kappa")}
    out["days"] = {key: _entry(a.get(key), b.get(key)) for key in DAY_KEYS}
    da, db = _day_model(a), _day_model(b)
    out["days"].update({f"model {key}": _entry(da.get(key), db.get(key)) for key in DAY_KEYS})
    groups: dict[str, Any] = {}
    for split in ("by_lang", "by_tag"):
        ga, gb = a.get(split) or {}, b.get(split) or {}
        groups[split] = {
            name: {key: _entry(ga.get(name, {}).get(key), gb.get(name, {}).get(key))
                   for key in GROUP_KEYS}
            for name in sorted({*ga, *gb})
        }  # fmt: skip
    out.update(groups)
    ra, rb = _right(a), _right(b)
    both = [sid for sid in ra if sid in rb]
    out["better"] = [sid for sid in both if rb[sid] and not ra[sid]]
    out["worse"] = [sid for sid in both if ra[sid] and not rb[sid]]
    return out


def render_compare(cmp: dict[str, Any], names: Sequence[str]) -> str:
    """The comparison as a table: A, B and B - A for every figure."""
    a, b = cmp["a"], cmp["b"]
    lines = [
        f"A: {names[0]}: model {a['model']}, output {a['output']}, "
        f"{a['scenarios']} scenarios, {a['days'] or 0} days",
        f"B: {names[1]}: model {b['model']}, output {b['output']}, "
        f"{b['scenarios']} scenarios, {b['days'] or 0} days",
    ]
    if (a["scenarios"], a["days"]) != (b["scenarios"], b["days"]):
        lines.append("note: the two runs scored different sets; compare with care")
    header = f"{'':<{LABEL}}{'A':>9}{'B':>9}{'B - A':>10}"
    for view in VIEWS if a["scenarios"] or b["scenarios"] else ():
        lines += ["", f"{view}", header]
        for key, entry in cmp[view].items():
            lines.append(_row(key, entry, kappa=key == "kappa"))
    if a["days"] or b["days"]:
        lines += ["", "days", header]
        for key, entry in cmp["days"].items():
            lines.append(_row(key, entry, count=key.endswith("over_budget")))
    for split, title in (("by_lang", "language"), ("by_tag", "tag")):
        if not cmp[split]:
            continue
        lines += ["", f"delivered, per {title}", header]
        for name, entries in cmp[split].items():
            for key, entry in entries.items():
                if entry["a"] is None and entry["b"] is None:
                    continue
                label = f"{name} {'recall' if key == 'push_recall' else 'false alarms'}"
                lines.append(_row(label, entry))
    lines += ["", f"right in B, not in A ({len(cmp['better'])}): {', '.join(cmp['better']) or '-'}"]
    lines.append(f"right in A, not in B ({len(cmp['worse'])}): {', '.join(cmp['worse']) or '-'}")
    return "\n".join(lines)


def _row(label: str, entry: dict[str, Any], *, kappa: bool = False, count: bool = False) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if count:
            return str(value)
        return f"{round(value, 2) + 0.0:.2f}" if kappa else f"{value * 100:.1f}%"

    diff = entry["diff"]
    if diff is None:
        delta = "-"
    elif count:
        delta = f"{diff:+d}" if isinstance(diff, int) else f"{diff:+g}"
    elif kappa:
        delta = f"{diff:+.2f}"
    else:
        delta = f"{diff * 100:+.1f} pp"
    return f"{label:<{LABEL}}{cell(entry['a']):>9}{cell(entry['b']):>9}{delta:>10}"
