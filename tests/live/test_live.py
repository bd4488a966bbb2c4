"""Real rounds against a real model: what must hold whatever the model writes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .live_helpers import LiveWorkdir, describe, run_checked

pytestmark = pytest.mark.live

# Rounds per (language, trigger): a weak model writes something different each time,
# and later rounds also see what earlier ones delivered into the session.
ROUNDS_PER_CASE = 3
# Seconds for one test: its rounds plus CLI start-ups, with room for a slow CPU.
CASE_TIMEOUT_S = ROUNDS_PER_CASE * 200


@pytest.mark.timeout(120)
def test_check_accepts_the_live_endpoint(make_workdir: Callable[[str], LiveWorkdir]) -> None:
    """`backthink check` passes against the served model and finds it in the model list."""
    workdir = make_workdir("en")
    out = workdir.cli("check").stdout
    (model_line,) = [line for line in out.splitlines() if line.startswith("ok  model:")]
    assert f"{workdir.model!r} is listed" in model_line


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize("trigger", ["heartbeat", "startup"])
@pytest.mark.parametrize("language", ["zh", "en"])
def test_rounds_keep_the_fail_safe_invariants(
    make_workdir: Callable[[str], LiveWorkdir], language: str, trigger: str
) -> None:
    """Every real round ends documented, delivers only post-footer text, never raises urgency."""
    workdir = make_workdir(language)
    workdir.seed()
    seen = []
    for _ in range(ROUNDS_PER_CASE):
        checked = run_checked(workdir, trigger)
        print(describe(checked))
        assert checked.record.trigger == trigger
        assert checked.violations == [], describe(checked)
        seen.append(checked.record.outcome.value)
    # The model really answered every time: nothing was skipped or failed before it.
    assert set(seen) <= {"suppressed", "delivered"}, seen
