"""A channel that failed every try is down for its cooldown in every process, not just one.

Two apps on one SQLite database stand for two processes (the daemon and a
one-shot `think`, or two workers): what one learns about a channel, the other
and `status` know at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.settings import BARE, make_settings

from backthink.config import Settings
from backthink.host.app import App, AppOverrides, build_app
from backthink.host.status import owner_status
from backthink.models import Outcome
from backthink.store import SqlStores, open_database
from backthink.testing import FakeClock, RecordingChannel, ScriptedModel, no_sleep

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai
TO_PHONE = "[我决定:push]\n[渠道:phone]\n下午三点的组会别忘了。"
LATER = "[我决定:push]\n[渠道:phone]\n晚上记得早点休息。"
AGAIN = "[我决定:push]\n[渠道:phone]\n明天的早饭想好吃什么了吗？"


def settings(db: Path) -> Settings:
    return make_settings(
        base=BARE,
        database={"url": f"sqlite+aiosqlite:///{db}"},
        gate={"default_channel": "web", "min_interval": "0s", "max_unanswered": 10},
        channels={
            "web": {"type": "web"},
            "phone": {"type": "webhook", "url": "http://127.0.0.1:9/never-sent"},
        },
    )


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Settings, SqlStores]]:
    s = settings(tmp_path / "bt.db")
    async with open_database(s.database) as opened:
        yield s, opened


def process(
    s: Settings, db: SqlStores, phone: RecordingChannel, clock: FakeClock, *replies: str
) -> App:
    """One process's app over the shared database, with its own phone sender."""
    return build_app(
        s,
        db,
        AppOverrides(
            model=ScriptedModel(*replies),
            clock=clock,
            channels={"phone": phone},
            persona_prompt="你好",
            sleep=no_sleep,
        ),
    )


async def test_a_channel_down_in_one_process_is_down_in_the_others_and_in_status(
    stores: tuple[Settings, SqlStores],
) -> None:
    """A think whose phone failed every try: status says down, the next think skips it."""
    s, db = stores
    clock = FakeClock(T0)
    first_phone = RecordingChannel("phone")
    first_phone.fail_next(10)
    first = process(s, db, first_phone, clock, TO_PHONE)
    record = await first.thinker.run_round("o", "heartbeat")
    # The phone failed its tries; the session channel took the push instead.
    assert (record.outcome, record.channel) == (Outcome.DELIVERED, "web")
    assert first_phone.attempts == 3

    status = await owner_status(
        s,
        "o",
        at=clock.now(),
        rounds=db.rounds,
        outbox=db.outbox,
        marks=db.marks,
        live=None,
        model="m",
    )
    assert status.channels == {"web": "ok", "phone": "down"}

    clock.advance(timedelta(minutes=1))
    second_phone = RecordingChannel("phone")
    second = process(s, db, second_phone, clock, LATER, AGAIN)
    again = await second.thinker.run_round("o", "heartbeat")
    assert (again.outcome, again.channel) == (Outcome.DELIVERED, "web")
    assert second_phone.attempts == 0, "a channel in its cooldown is not tried again"

    clock.advance(s.gate.channel_cooldown)
    later = await second.thinker.run_round("o", "heartbeat")
    assert (later.outcome, later.channel) == (Outcome.DELIVERED, "phone")
    status = await owner_status(
        s,
        "o",
        at=clock.now(),
        rounds=db.rounds,
        outbox=db.outbox,
        marks=db.marks,
        live=None,
        model="m",
    )
    assert status.channels == {"web": "ok", "phone": "ok"}
