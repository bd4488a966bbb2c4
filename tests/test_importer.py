"""Messages typed on the command line or imported from JSON Lines: validation before storage."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from backthink.errors import InputError
from backthink.store.importing import (
    IMPORT_MAX_CHARS,
    IMPORT_MAX_IMAGE_CHARS,
    parse_jsonl,
    parse_one,
)

NOW = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai
SHANGHAI = ZoneInfo("Asia/Shanghai")


def lines(*items: dict[str, object]) -> list[str]:
    """JSON Lines for the given objects."""
    return [json.dumps(item, ensure_ascii=False) for item in items]


def test_import_refuses_a_future_time_and_names_the_line() -> None:
    """A message dated past the clock skew is refused, all or nothing, naming line and field."""
    text = lines(
        {"role": "user", "text": "早", "at": "2026-11-30T08:00:00+08:00"},
        {"role": "assistant", "text": "早上好"},
        {"role": "user", "text": "明天见", "at": "2026-12-01T09:00:00+08:00"},
    )
    with pytest.raises(InputError) as info:
        parse_jsonl(text, source="chat.jsonl", owner_id="o", now=NOW, tz=SHANGHAI)
    message = str(info.value)
    assert message.startswith("chat.jsonl:3: at: ")
    assert "2026-12-01T09:00:00+08:00" in message and message.endswith("is in the future")
    assert "\n" not in message


def test_local_time_without_zone_is_judged_in_the_owner_zone() -> None:
    """A zoneless time is the owner's local time, so 12:30 Shanghai is future at 12:00."""
    with pytest.raises(InputError, match=r"^messages add: at: .* is in the future$"):
        parse_one(
            {"role": "user", "text": "x", "at": "2026-11-30T12:30:00"},
            where="messages add",
            owner_id="o",
            now=NOW,
            tz=SHANGHAI,
        )


@pytest.mark.parametrize(
    "ahead", [timedelta(0), timedelta(minutes=4, seconds=59), timedelta(minutes=5)]
)
def test_small_clock_skew_is_accepted(ahead: timedelta) -> None:
    """A time up to five minutes ahead is clock skew between machines, not an error."""
    at = (NOW + ahead).isoformat()
    message = parse_one(
        {"role": "user", "text": "x", "at": at}, where="w", owner_id="o", now=NOW, tz=SHANGHAI
    )
    assert message.created_at == NOW + ahead


def test_past_and_missing_times_are_accepted() -> None:
    """Past times are kept as written, and a missing time means now."""
    parsed = parse_jsonl(
        lines(
            {"role": "user", "text": "a", "at": "2020-01-01T00:00:00Z"},
            {"role": "user", "text": "b"},
        ),
        source="f",
        owner_id="o",
        now=NOW,
        tz=SHANGHAI,
    )
    assert [m.created_at for m in parsed] == [datetime(2020, 1, 1, tzinfo=UTC), NOW]


def test_import_refuses_a_huge_text_naming_line_and_key() -> None:
    """A text past the import limit is refused, all or nothing, in one line naming line and key."""
    text = lines(
        {"role": "user", "text": "早"},
        {"role": "assistant", "text": "早上好"},
        {"role": "user", "text": "x" * (IMPORT_MAX_CHARS + 1)},
    )
    with pytest.raises(InputError) as info:
        parse_jsonl(text, source="chat.jsonl", owner_id="o", now=NOW, tz=SHANGHAI)
    assert str(info.value) == f"chat.jsonl:3: text: longer than {IMPORT_MAX_CHARS} characters"


def test_import_accepts_a_text_at_the_limit() -> None:
    """A text of exactly the limit is accepted."""
    (message,) = parse_jsonl(
        lines({"role": "user", "text": "x" * IMPORT_MAX_CHARS}),
        source="f",
        owner_id="o",
        now=NOW,
        tz=SHANGHAI,
    )
    assert len(message.text) == IMPORT_MAX_CHARS


def test_messages_add_refuses_a_huge_image() -> None:
    """An image (URL or data URI) past its limit is refused the same way."""
    image = "data:image/png;base64," + "A" * IMPORT_MAX_IMAGE_CHARS
    with pytest.raises(InputError) as info:
        parse_one(
            {"role": "user", "text": "看", "image": image},
            where="messages add",
            owner_id="o",
            now=NOW,
            tz=SHANGHAI,
        )
    assert str(info.value) == (
        f"messages add: image: longer than {IMPORT_MAX_IMAGE_CHARS} characters"
    )


def test_a_line_nested_too_deep_is_refused_with_its_number() -> None:
    """A line of nested arrays past the decoder's depth is an input error naming the line."""
    text = [*lines({"role": "user", "text": "早"}), "[" * 5_000]
    with pytest.raises(InputError, match=r"^chat.jsonl:2: not valid JSON \(nested too deep\)$"):
        parse_jsonl(text, source="chat.jsonl", owner_id="o", now=NOW, tz=SHANGHAI)
