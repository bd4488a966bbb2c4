"""Time notes in the history: where the owner's day changes or a long silence ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from backthink.models import Message
from backthink.protocol import TIME_MARKER
from backthink.round.context import conversation, time_notes

SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
T0 = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)  # 22:00 on Sunday in Shanghai


def msg(role: str, text: str, at: datetime, speaker: str | None = None) -> Message:
    """A stored message of owner o at `at`."""
    return Message(owner_id="o", role=role, text=text, speaker=speaker, created_at=at)


def test_a_quiet_evening_gets_one_note_at_its_start() -> None:
    """Messages minutes apart on one day: only the first message is dated."""
    recent = [msg("user", f"m{i}", T0 + timedelta(minutes=5 * i)) for i in range(4)]
    assert time_notes(recent, tz=SHANGHAI, language="zh") == {0: "[时间] 2026年11月29日 周日 22:00"}


def test_the_owners_midnight_and_a_long_silence_are_marked() -> None:
    """A new local day is dated; a silence of three hours or more gets the time and its length."""
    recent = [
        msg("user", "晚安", T0 + timedelta(hours=1, minutes=50)),  # 23:50
        msg("user", "睡不着", T0 + timedelta(hours=2, minutes=10)),  # 00:10, Monday
        msg("user", "早", T0 + timedelta(hours=10)),  # 08:00, the same Monday
        msg("user", "出门了", T0 + timedelta(hours=10, minutes=20)),
    ]
    assert time_notes(recent, tz=SHANGHAI, language="zh") == {
        0: "[时间] 2026年11月29日 周日 23:50",
        1: "[时间] 2026年11月30日 周一 00:10",
        2: "[时间] 08:00（距上一条约 8 小时）",
    }
    english = time_notes(recent, tz=SHANGHAI, language="en")
    assert english[1] == "[time] Mon 30 Nov 2026 00:10"
    assert english[2] == "[time] 08:00 (8 h after the previous message)"


def test_days_follow_the_owners_clock_across_a_dst_change() -> None:
    """New York's clocks fall back: the local day, not the UTC day, decides the note."""
    evening = datetime(2026, 11, 1, 3, 30, tzinfo=UTC)  # 23:30 EDT on Saturday 31 October
    later = datetime(2026, 11, 1, 4, 30, tzinfo=UTC)  # 00:30 EDT on Sunday 1 November
    notes = time_notes(
        [msg("user", "a", evening), msg("user", "b", later)], tz=NEW_YORK, language="en"
    )
    assert notes == {0: "[time] Sat 31 Oct 2026 23:30", 1: "[time] Sun 1 Nov 2026 00:30"}


def test_a_note_is_its_own_system_message_before_the_speaker_note() -> None:
    """The time note precedes the message it dates, and that message's speaker note."""
    recent = [
        msg("user", "在吗", T0),
        msg("assistant", "我在", T0 + timedelta(hours=12), speaker="march7"),
    ]
    out = conversation(recent, persona_id="cyrene", names={}, tz=SHANGHAI)
    texts = [m.text for m in out]
    assert texts[1:] == [
        "[时间] 2026年11月29日 周日 22:00",
        "在吗",
        "[时间] 2026年11月30日 周一 10:00",
        "[发言归属] 以下发言来自「march7」，不是你说的。",
        "我在",
    ]
    assert [m.role for m in out if m.text.startswith(TIME_MARKER["zh"])] == ["system", "system"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant"]),
            st.text(max_size=20),
            st.integers(0, 72 * 60),
        ),
        max_size=12,
    )
)
def test_notes_only_add_system_messages_and_are_stable(
    items: list[tuple[str, str, int]],
) -> None:
    """Time notes never touch a message body, never reorder, and repeat byte for byte."""
    recent = [
        msg(
            role,
            text,
            T0 + timedelta(minutes=minutes),
            speaker="cyrene" if role == "assistant" else None,
        )
        for role, text, minutes in sorted(items, key=lambda item: item[2])
    ]
    plain = conversation(recent, persona_id="cyrene", names={})
    timed = conversation(recent, persona_id="cyrene", names={}, tz=SHANGHAI)
    assert timed == conversation(recent, persona_id="cyrene", names={}, tz=SHANGHAI)
    notes = [m for m in timed if m.role == "system" and m not in plain]
    assert all(m.text.startswith(TIME_MARKER["zh"]) for m in notes)
    assert [m for m in timed if m not in notes] == plain
