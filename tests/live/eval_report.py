"""Run `backthink eval` on the shipped scenarios against a live endpoint, in both output modes.

Each mode gets its own folder and config (the design's default gate, the live
tier's model settings), runs the real command line, keeps the `--json` object
as `eval-<mode>.json` and prints the figures side by side. Exits 1 when a run
failed or the json_schema mode parsed fewer replies than `--min-parse-rate`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "eval/scenarios.jsonl"
MODES = ("footer", "json_schema")
DEFAULT_MODEL = "SmolLM2-135M-Instruct"
MODEL_TIMEOUT_S = 120  # seconds per round; a 2-core CPU is slow on long prompts
# tokens: the default of model.max_tokens, so the figures are those an owner gets.
MAX_TOKENS = 400
# One command runs every scenario: its bound is the rounds' bound, with room.
RUN_TIMEOUT_S = 3 * 3600  # seconds
# The constrained mode's goal with a 135M model.
MIN_PARSE_RATE = 0.95
FIGURES = (
    "parse_rate",
    "push_precision",
    "push_recall",
    "false_alarm_rate",
    "critical_recall",
    "on_point_rate",
)


def write_config(folder: Path, *, base_url: str, model: str, output: str) -> Path:
    """A config with the design's default gate and the live model; nothing else is used."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "backthink.toml"
    config.write_text(
        f"""
[owner]
id = "o"
timezone = "Asia/Shanghai"

[persona]
id = "cyrene"
name = "昔涟"

[model]
base_url = "{base_url}"
name = "{model}"
timeout_s = {MODEL_TIMEOUT_S}
max_retries = 0
max_tokens = {MAX_TOKENS}
output = "{output}"

[database]
url = "sqlite+aiosqlite:///{folder / "never-used.db"}"

[prompt]
dir = "{ROOT / "backthink/prompts"}"

[gate]
quiet_hours = "23:00-07:00"
quiet_mode = "critical_only"
activity_window = "10m"
min_interval = "2h"
daily_cap = 4
max_unanswered = 2
max_body_chars = 600
duplicate_window = "24h"
default_channel = "web"
""",
        encoding="utf-8",
    )
    return config


def run_mode(
    folder: Path, *, base_url: str, model: str, output: str, scenarios: Path, repeat: int
) -> dict[str, Any]:
    """Run the eval command for one mode and return its JSON object."""
    config = write_config(folder, base_url=base_url, model=model, output=output)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    command = [sys.executable, "-m", "backthink", "--config", str(config), "eval", str(scenarios)]
    command += ["--json", "--repeat", str(repeat)]
    started = time.monotonic()
    proc = subprocess.run(
        command,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    (folder / "stderr.log").write_text(proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise RuntimeError(f"eval ({output}) exited {proc.returncode}: {proc.stderr.strip()}")
    data: dict[str, Any] = json.loads(proc.stdout)
    data["wall_s"] = time.monotonic() - started
    (folder.parent / f"eval-{output}.json").write_text(
        json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    return data


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def render(results: dict[str, dict[str, Any]]) -> str:
    """The figures of every mode, overall and per language, side by side."""
    columns = [(mode, lang) for mode in results for lang in ("all", "zh", "en")]
    head = "".join(f"{mode[:6] + ' ' + lang:>15}" for mode, lang in columns)
    lines = [f"{'':<17}{head}"]

    def cell(mode: str, lang: str) -> dict[str, Any]:
        data = results[mode]
        return data if lang == "all" else data["by_lang"].get(lang, {})

    for key in ("runs", "replies", "pushes", "errors"):
        lines.append(
            f"{key:<17}" + "".join(f"{cell(m, lang).get(key, '-'):>15}" for m, lang in columns)
        )
    for key in FIGURES:
        lines.append(
            f"{key:<17}" + "".join(f"{_percent(cell(m, lang).get(key)):>15}" for m, lang in columns)
        )
    for mode, data in results.items():
        views = [*data["figures"].items(), *data["baselines"].items()]
        lines.append("")
        lines.append(f"{mode:<17}" + "".join(f"{name:>11}" for name, _ in views))
        for key in ("pushes", *FIGURES):
            cells = [f[key] if key == "pushes" else _percent(f[key]) for _, f in views]
            lines.append(f"{key:<17}" + "".join(f"{cell:>11}" for cell in cells))
        kappas = ["-" if f["kappa"] is None else f"{f['kappa']:.2f}" for _, f in views]
        lines.append(f"{'kappa':<17}" + "".join(f"{cell:>11}" for cell in kappas))
        if data.get("days"):
            days = [*data["day_figures"].items(), *data["day_baselines"].items()]
            for key in ("day_precision", "day_recall", "over_budget"):
                cells = [f[key] if key == "over_budget" else _percent(f[key]) for _, f in days]
                lines.append(f"{key:<17}" + "".join(f"{cell:>11}" for cell in cells))
    lines.append("")
    for mode, data in results.items():
        latency = data["latency_ms"]
        p50 = latency["p50"]
        lines.append(
            f"{mode}: {data['tokens']['prompt']} prompt + {data['tokens']['completion']} "
            f"completion tokens; latency p50 "
            f"{'-' if p50 is None else f'{p50:.0f} ms'}; {data['wall_s']:.0f} s in all"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both modes, print the figures, and judge them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name sent with requests")
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS, help="a scenario file")
    parser.add_argument("--repeat", type=int, default=1, help="runs per scenario")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated output modes")
    parser.add_argument(
        "--dir", type=Path, default=ROOT / "var/live/eval", help="where configs and JSON go"
    )
    parser.add_argument(
        "--min-parse-rate",
        type=float,
        default=MIN_PARSE_RATE,
        help="the least parse rate the json_schema mode must reach",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    results: dict[str, dict[str, Any]] = {}
    for mode in modes:
        print(f"live eval: {args.scenarios.name} in {mode} mode", flush=True)
        results[mode] = run_mode(
            args.dir / mode,
            base_url=args.base_url,
            model=args.model,
            output=mode,
            scenarios=args.scenarios,
            repeat=args.repeat,
        )
    print(render(results), flush=True)
    code = 0
    for mode, data in results.items():
        if data["errors"]:
            print(f"live eval: {mode}: {data['errors']} runs failed", file=sys.stderr)
            code = 1
    constrained = results.get("json_schema")
    # A file of days only has no single scenario whose replies a parse rate counts.
    if constrained is not None and constrained["scenarios"]:
        rate = constrained["parse_rate"]
        if rate is None or rate < args.min_parse_rate:
            print(
                f"live eval: json_schema parse rate {_percent(rate)} is below "
                f"{_percent(args.min_parse_rate)}",
                file=sys.stderr,
            )
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
