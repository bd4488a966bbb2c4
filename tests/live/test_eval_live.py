"""`backthink eval` against a real model: both output modes run the real pipeline and score it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .eval_report import SCENARIOS, run_mode

pytestmark = pytest.mark.live

# A few scenarios of each language keep this test short; `make test-live` runs them all
# afterwards through eval_report.py.
PER_LANGUAGE = 3
CASE_TIMEOUT_S = 2 * PER_LANGUAGE * 200  # seconds: the rounds plus start-up, on a slow CPU


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize("output", ["footer", "json_schema"])
def test_eval_scores_real_replies(
    tmp_path: Path, live_base_url: str, live_model: str, output: str
) -> None:
    """Every run ends with a documented outcome, no call fails, and the figures are fractions."""
    docs = [json.loads(line) for line in SCENARIOS.read_text(encoding="utf-8").splitlines()]
    chosen = [d for d in docs if d["lang"] == "zh"][:PER_LANGUAGE]
    chosen += [d for d in docs if d["lang"] == "en"][:PER_LANGUAGE]
    file = tmp_path / "some.jsonl"
    file.write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in chosen), encoding="utf-8"
    )
    data = run_mode(
        tmp_path / output,
        base_url=live_base_url,
        model=live_model,
        output=output,
        scenarios=file,
        repeat=1,
    )
    print(json.dumps({k: data[k] for k in ("parse_rate", "pushes", "false_alarm_rate")}))
    assert data["output"] == output
    assert (data["scenarios"], data["runs"]) == (len(chosen), len(chosen))
    assert data["errors"] == 0
    assert [r["id"] for r in data["results"]] == [d["id"] for d in chosen]
    for result in data["results"]:
        assert result["outcome"] in {"skipped", "suppressed", "delivered"}
        # A delivered push is one the gate let through: never one the scenario's
        # owner is still typing in, never a routine push in quiet hours.
        if result["id"].endswith("still-chatting"):
            assert result["reason"] == "owner_active"
    for key in ("parse_rate", "false_alarm_rate"):
        assert data[key] is None or 0.0 <= data[key] <= 1.0
    assert not (tmp_path / output / "never-used.db").exists()
