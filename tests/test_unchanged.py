"""Unchanged beats: a heartbeat that would ask what the last silent round asked calls no model."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from backthink.config import Settings
from backthink.models import (
    Availability,
    Memory,
    MemoryKind,
    Message,
    Outcome,
    RoundState,
    ScheduleItem,
    StateReading,
)
from backthink.records import RoundRecord
from backthink.round.unchanged import part_of_day
from backthink.testing import Rig, ScriptedModel, StaticState, make_rig, seed_history

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # 14:00 in Shanghai, an afternoon
NO_PUSH = "想了想，没什么要说的。\n[我决定:no_push]"
PUSH = "[我决定:push]\n记得带伞。"
BEAT = timedelta(minutes=30)


def settings(
    timezone: str = "Asia/Shanghai",
    gate: dict[str, object] | None = None,
    prompt: dict[str, object] | None = None,
    **schedule: object,
) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "name": "开拓者", "timezone": timezone},
            "persona": {"id": "cyrene", "name": "昔涟"},
            "prompt": {"dir": str(PROMPTS), **(prompt or {})},
            "gate": {"default_channel": "web", "quiet_hours": "", **(gate or {})},
            "schedule": schedule,
        }
    )


async def rig_at(
    at: datetime,
    *replies: str,
    s: Settings | None = None,
    state: RoundState | StaticState | None = None,
    history: Sequence[tuple[str, str, str | None]] = (
        ("user", "今天好累", None),
        ("assistant", "辛苦了", "cyrene"),
    ),
) -> tuple[Rig, ScriptedModel]:
    model = ScriptedModel(*replies)
    provider = state if isinstance(state, StaticState) else StaticState(state)
    rig = make_rig(s or settings(), model=model, state=provider, persona_prompt="你是昔涟。")
    rig.clock.set(at)
    await seed_history(rig.messages, history, start=at - timedelta(hours=3))
    return rig, model


async def beat(rig: Rig, trigger: str = "heartbeat") -> RoundRecord:
    return await rig.thinker.run_round("o", trigger)


def outcome(record: RoundRecord) -> tuple[str, str]:
    return record.outcome.value, record.reason


async def silent_then_skipped(rig: Rig) -> None:
    """A silent beat, then one a minute later that is skipped: the comparison is armed."""
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    rig.clock.advance(timedelta(minutes=1))
    assert outcome(await beat(rig)) == ("skipped", "unchanged")


async def test_a_heartbeat_that_sees_nothing_new_is_skipped_without_a_model_call() -> None:
    """The second of two identical silent beats ends skipped/unchanged and names the first."""
    rig, model = await rig_at(T0, NO_PUSH)
    first = await beat(rig)
    rig.clock.advance(BEAT)
    second = await beat(rig)
    assert outcome(first) == ("suppressed", "no_push") and first.digest
    assert outcome(second) == ("skipped", "unchanged")
    assert second.digest is None and second.prompt_tokens is None
    assert any(first.id[:12] in note for note in second.notes)
    assert len(model.calls) == 1


async def test_skipped_beats_keep_skipping_until_something_changes() -> None:
    """Skipped beats do not reset the comparison: it stays with the last round that asked."""
    rig, model = await rig_at(T0, NO_PUSH)
    await beat(rig)
    for _ in range(3):
        rig.clock.advance(BEAT)
        assert outcome(await beat(rig)) == ("skipped", "unchanged")
    assert len(model.calls) == 1


async def test_a_new_message_asks_again() -> None:
    """A message in the window changes the digest."""
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH)
    await silent_then_skipped(rig)
    await rig.messages.add(
        Message(owner_id="o", role="user", text="晚上吃什么", created_at=rig.clock.now())
    )
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


async def test_an_edited_message_asks_again() -> None:
    """The window's texts count, not only its ids."""
    rig, _model = await rig_at(T0, NO_PUSH, NO_PUSH)
    await silent_then_skipped(rig)
    first = (await rig.rounds.list(limit=2))[1]
    view = await rig.messages.session_view("o", 20)
    last = view.recent[-1]
    rig.messages._sessions[("o", "main")][-1] = last.model_copy(update={"text": "辛苦了！"})
    rig.clock.advance(BEAT)
    second = await beat(rig)
    assert outcome(second) == ("suppressed", "no_push") and second.digest != first.digest


async def test_an_edited_state_asks_again_and_a_rewritten_stamp_does_not() -> None:
    """New facts in the state file count; the same facts with a newer updated_at do not."""
    state = RoundState(updated_at=T0, availability=Availability.AVAILABLE, notes=["在图书馆"])
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH, state=state)
    await beat(rig)
    rig.clock.advance(BEAT)
    rig.state.reading = rig.state.reading.model_copy(
        update={"state": state.model_copy(update={"updated_at": rig.clock.now()})}
    )
    assert outcome(await beat(rig)) == ("skipped", "unchanged")
    busy = state.model_copy(update={"availability": Availability.BUSY})
    rig.state.reading = rig.state.reading.model_copy(update={"state": busy})
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


async def test_a_schedule_item_coming_into_the_horizon_asks_again() -> None:
    """An event entering the state block's next 24 hours changes the digest."""
    later = ScheduleItem(at=T0 + timedelta(hours=24, minutes=20), title="组会")
    state = RoundState(updated_at=T0, schedule=[later])
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH, state=state)
    await silent_then_skipped(rig)
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


async def test_a_new_journal_thought_asks_again() -> None:
    """A thought kept by another round (or written in) changes the journal ids."""
    rig, model = await rig_at(T0, "[我决定:no_push]", NO_PUSH)
    await silent_then_skipped(rig)  # a reply with no thought keeps none
    await rig.memories.add(
        Memory(
            owner_id="o",
            kind=MemoryKind.THOUGHT,
            text="TA 最近睡得很晚",
            created_at=rig.clock.now(),
            source="cli",
        )
    )
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


class CountedState(StaticState):
    """A state provider that counts its reads: one read per request built."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, at: datetime) -> StateReading:
        self.reads += 1
        return super().read(at)


async def test_a_silent_heartbeat_builds_its_request_once() -> None:
    """The next beat's digest is hashed from the request already built, not from a second one."""
    counted = CountedState()
    rig, _model = await rig_at(T0, NO_PUSH, state=counted)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert counted.reads == 1
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("skipped", "unchanged")


async def test_a_kept_thought_that_crowds_out_old_history_is_nothing_new() -> None:
    """The history cut moving to make room for the journal does not make a beat ask again."""
    thought = "今天" + "想了很多事情，" * 40 + "\n[我决定:no_push]"
    told = [("user", f"第{i}件事：" + "今天的课很难懂。" * 20, None) for i in range(12)]
    rig, _model = await rig_at(T0, thought, s=settings(prompt={"max_chars": 2_400}), history=told)
    first = await beat(rig)
    assert outcome(first) == ("suppressed", "no_push")
    trimmed = [note for note in first.notes if note.startswith("history_trimmed")]
    # The thought now in the journal leaves less room: the next request drops more history.
    rig.clock.advance(BEAT)
    after = await rig.thinker.prepare("o", "heartbeat")
    assert trimmed and trimmed[0] not in after.notes
    assert outcome(await beat(rig)) == ("skipped", "unchanged")


@pytest.mark.parametrize(
    ("first", "second", "zone", "same"),
    [
        # Shanghai: 05:40 is night, 06:10 morning.
        (
            datetime(2026, 11, 29, 21, 40, tzinfo=UTC),
            datetime(2026, 11, 29, 22, 10, tzinfo=UTC),
            "Asia/Shanghai",
            False,
        ),
        # Shanghai: 13:10 and 13:40, one afternoon.
        (
            datetime(2026, 11, 30, 5, 10, tzinfo=UTC),
            datetime(2026, 11, 30, 5, 40, tzinfo=UTC),
            "Asia/Shanghai",
            True,
        ),
        # New York, the day clocks go forward: 05:40 EDT is night, 06:10 EDT morning
        # (on standard time's offset both would still be night).
        (
            datetime(2026, 3, 8, 9, 40, tzinfo=UTC),
            datetime(2026, 3, 8, 10, 10, tzinfo=UTC),
            "America/New_York",
            False,
        ),
        # New York, the day clocks go back: 01:40 EDT, then 01:10 EST half an hour later:
        # the same night of the same date, though the wall clock went backwards.
        (
            datetime(2026, 11, 1, 5, 40, tzinfo=UTC),
            datetime(2026, 11, 1, 6, 10, tzinfo=UTC),
            "America/New_York",
            True,
        ),
    ],
)
async def test_the_part_of_the_day_is_the_owners_local_one(
    first: datetime, second: datetime, zone: str, same: bool
) -> None:
    """Crossing into the morning asks again, by the owner's zone and its DST rules."""
    rig, _model = await rig_at(first, NO_PUSH, NO_PUSH, s=settings(zone))
    await silent_then_skipped(rig)
    rig.clock.set(second)
    expected = ("skipped", "unchanged") if same else ("suppressed", "no_push")
    assert outcome(await beat(rig)) == expected


async def test_a_new_day_asks_again() -> None:
    """The same hour of the next day is another question, however long silence may last."""
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH, s=settings(max_silence="30h"))
    await silent_then_skipped(rig)
    rig.clock.advance(timedelta(hours=24))
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


async def test_max_silence_bounds_the_skipping() -> None:
    """Once the silent round is max_silence old, the model is asked again."""
    rig, _model = await rig_at(T0, NO_PUSH, NO_PUSH, s=settings(max_silence="1h"))
    await beat(rig)
    rig.clock.advance(timedelta(minutes=59))
    assert outcome(await beat(rig)) == ("skipped", "unchanged")
    rig.clock.advance(timedelta(minutes=1))
    assert outcome(await beat(rig)) == ("suppressed", "no_push")


@pytest.mark.parametrize("trigger", ["startup", "cron", "提醒：三点的会"])
async def test_greetings_cron_and_pokes_never_skip(trigger: str) -> None:
    """Only heartbeats compare: a greeting, a cron round or a poke always asks."""
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH, NO_PUSH)
    await silent_then_skipped(rig)
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig, trigger)) == ("suppressed", "no_push")
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig, trigger)) == ("suppressed", "no_push")
    assert len(model.calls) == 3


async def test_a_heartbeat_after_a_silent_greeting_asks() -> None:
    """A greeting asks another question than a heartbeat: the next heartbeat is not skipped."""
    rig, _model = await rig_at(T0, NO_PUSH, NO_PUSH)
    await beat(rig, "startup")
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("skipped", "unchanged")


async def test_a_round_that_wanted_to_push_is_asked_again() -> None:
    """Only no_push counts as silence: a push the gate held back may pass at the next beat."""
    rig, model = await rig_at(T0, PUSH, NO_PUSH, s=settings(gate={"daily_cap": 0}))
    first = await beat(rig)
    assert first.outcome is Outcome.SUPPRESSED and first.reason == "daily_cap"
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("skipped", "unchanged")
    assert len(model.calls) == 2


async def test_skipping_can_be_turned_off() -> None:
    """schedule.skip_unchanged = false asks the model on every heartbeat."""
    rig, model = await rig_at(T0, NO_PUSH, NO_PUSH, s=settings(skip_unchanged=False))
    await beat(rig)
    rig.clock.advance(BEAT)
    assert outcome(await beat(rig)) == ("suppressed", "no_push")
    assert len(model.calls) == 2


@pytest.mark.parametrize(
    ("hour", "part"),
    [
        (0, "night"),
        (5, "night"),
        (6, "morning"),
        (11, "morning"),
        (12, "afternoon"),
        (17, "afternoon"),
        (18, "evening"),
        (23, "evening"),
    ],
)
def test_parts_of_the_day(hour: int, part: str) -> None:
    """night 0-6, morning 6-12, afternoon 12-18, evening 18-24."""
    assert part_of_day(datetime(2026, 12, 1, hour, 30, tzinfo=SHANGHAI)) == part


async def test_a_time_the_owner_named_coming_due_asks_again() -> None:
    """'Remind me at 3' said hours ago: the beat at 15:00 asks the model, though nothing changed."""
    rig, model = await rig_at(T0, NO_PUSH, PUSH)  # 14:00 Shanghai
    await rig.messages.add(
        Message(owner_id="o", role="user", text="下午3点提醒我给兽医打电话",
                created_at=T0 - timedelta(hours=2))
    )  # fmt: skip
    await silent_then_skipped(rig)  # 14:00 asked, 14:01 skipped: 15:00 is "within 1 h" both times
    rig.clock.set(T0 + timedelta(hours=1))  # 15:00: due
    assert outcome(await beat(rig)) == ("delivered", "web")
    model.assert_complete()


@pytest.mark.parametrize(
    ("text", "at_hour", "expected"),
    [
        ("remind me at 8 to call the vet", 7.5, [("08:00", "within 1 h")]),
        ("remind me at 8 to call the vet", 8.0, [("08:00", "due")]),
        ("standup 9:45", 7.5, [("09:45", "within 3 h")]),
        ("dinner 7pm", 18.0, [("19:00", "within 1 h")]),
        ("明早十点半开会", 8.0, [("10:30", "within 3 h")]),
        ("晚上八点见", 19.25, [("20:00", "within 1 h")]),
        ("we got 8 of them", 7.5, []),  # a number is no time
        ("remind me at 8", 12.0, []),  # 20:00 is later than three hours, 08:00 is past
    ],
)
def test_named_times_and_how_near_they_are(
    text: str, at_hour: float, expected: list[tuple[str, str]]
) -> None:
    """Clear forms of a time of day are read in both languages; bare numbers are not."""
    from backthink.round.clock_mentions import near_times

    at = datetime(2026, 1, 20, tzinfo=SHANGHAI) + timedelta(hours=at_hour)
    assert near_times([text], at=at, tz=SHANGHAI) == expected


@pytest.mark.parametrize(
    ("hour", "winding"),
    [(20.5, False), (21.0, True), (22.9, True), (23.5, False), (12.0, False)],
)
def test_the_last_two_hours_before_quiet_hours_are_a_part_of_their_own(
    hour: float, winding: bool
) -> None:
    """19:30 and 21:40 differ for the digest when quiet hours begin at 23:00."""
    from backthink.config import QuietHours
    from backthink.round.unchanged import winding_down

    local = datetime(2026, 6, 27, tzinfo=SHANGHAI) + timedelta(hours=hour)
    assert winding_down(local, QuietHours.parse("23:00-07:00")) is winding
    assert winding_down(local, None) is False
