"""A whole scripted day on SQLite: every reason code that can occur, in the right order."""

from __future__ import annotations

from pathlib import Path

from support.scripted_day import run_day


async def test_scripted_day_covers_every_reason(tmp_path: Path) -> None:
    """Each round of the day ends with the outcome and reason its situation calls for."""
    records = await run_day(f"sqlite+aiosqlite:///{tmp_path / 'day.db'}")
    got = [(r.outcome.value, r.reason) for r in records]
    assert got == [
        ("skipped", "quiet_hours"),
        ("suppressed", "quiet_hours"),
        ("delivered", "web"),
        ("suppressed", "no_push"),
        ("skipped", "unchanged"),
        ("suppressed", "parse_failed"),
        ("skipped", "owner_active"),
        ("suppressed", "owner_active"),
        ("suppressed", "unavailable"),
        ("delivered", "phone"),
        ("suppressed", "min_interval"),
        ("suppressed", "duplicate"),
        ("suppressed", "empty_body"),
        ("suppressed", "body_too_long"),
        ("failed", "model_error"),
        ("failed", "model_timeout"),
        ("delivered", "phone"),
        ("failed", "delivery_failed"),
        ("suppressed", "unanswered"),
        ("failed", "store_error"),
        ("delivered", "phone"),
        ("skipped", "no_route"),
        ("suppressed", "no_route"),
        ("suppressed", "no_push"),
        ("skipped", "busy"),
        ("suppressed", "daily_cap"),
    ]
    assert records[2].urgency is not None and records[2].urgency.value == "critical"
    assert records[16].trigger == "startup"
