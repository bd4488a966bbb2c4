"""A scripted day of rounds on SQLite, covering every reason code a round can end with.

Run as a script to keep the database and look at it with `backthink rounds`::

    python tests/scripted_day.py var/day.db
    BACKTHINK_DATABASE__URL=sqlite+aiosqlite:///var/day.db backthink --owner day rounds --limit 50
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from backthink.config import Settings
from backthink.errors import ModelError, ModelTimeoutError, StoreError
from backthink.host.app import AppOverrides, build_app
from backthink.models import Availability, Message, OwnerActivity, RoundState
from backthink.records import ModelMessage, ModelReply, RoundRecord
from backthink.round.thinker import Thinker
from backthink.store import SqlMessageStore, SqlStores, open_store
from backthink.testing import FakeClock, RecordingChannel, ScriptedModel, StaticState, no_sleep
from support.settings import DROP, make_settings

OWNER = "day"
DAY = datetime(2026, 11, 29, 22, 30, tzinfo=UTC)  # 06:30 on Monday 30 November in Shanghai


def push(body: str, urgency: str = "routine", channel: str | None = None) -> str:
    lines = ["[我决定:push]", f"[紧急:{urgency}]"]
    if channel:
        lines.append(f"[渠道:{channel}]")
    return "\n".join([*lines, body])


class DayModel(ScriptedModel):
    """A scripted model that can also stall forever (for the single-flight round)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall: asyncio.Event | None = None
        self.drops: RecordingChannel | None = None
        """A channel that goes away while the model thinks (then stays away)."""

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        if self.stall is not None:
            await self.stall.wait()
        if self.drops is not None:
            self.drops.disconnect()
            self.drops = None
        return await super().complete(messages, tools=tools)


class FlakyProactiveStore(SqlMessageStore):
    """A message store whose gate-history read fails once, as a locked database would."""

    fail_next = False

    async def owner_activity(
        self, owner_id: str, *, messages: int, pushes: int, session_id: str = "main"
    ) -> OwnerActivity:
        if self.fail_next:
            self.fail_next = False
            raise StoreError("could not read messages: database is locked")
        return await super().owner_activity(
            owner_id, messages=messages, pushes=pushes, session_id=session_id
        )


def settings(**gate: object) -> Settings:
    return make_settings(
        owner={"id": OWNER},
        # The shipped quiet hours: the day has rounds inside them.
        gate={"quiet_hours": DROP, "max_unanswered": 3, "daily_cap": 5, **gate},
        channels={
            "web": {"type": "web"},
            "phone": {"type": "webhook", "url": "http://127.0.0.1:9/never-sent"},
        },
    )


async def run_day(url: str) -> list[RoundRecord]:
    """Play the day and return every round, oldest first."""
    db, _, _ = await open_store(url)
    messages = FlakyProactiveStore(db)
    # The database's whole set, its message store the one whose reads can fail.
    stores = replace(SqlStores.over(db), messages=messages)
    rounds = stores.rounds
    clock = FakeClock(DAY)
    model = DayModel()
    state = StaticState()
    web, phone = RecordingChannel("web"), RecordingChannel("phone")

    def thinker(s: Settings, channels: Sequence[RecordingChannel] = (web, phone)) -> Thinker:
        app = build_app(
            s,
            stores,
            AppOverrides(
                model=model,
                clock=clock,
                state=state,
                channels={c.name: c for c in channels},
                persona_prompt="你是昔涟。",
                sleep=no_sleep,
            ),
        )
        return app.thinker

    main = thinker(settings())
    skip_quiet = thinker(settings(quiet_mode="skip"))
    nowhere = thinker(settings(), channels=[RecordingChannel("web", connected=False)])
    lone = RecordingChannel("web")
    unrouted = thinker(settings(), channels=[lone])

    async def at(hour: int, minute: int = 0) -> None:
        clock.set(DAY.replace(hour=22, minute=30) + timedelta(hours=hour - 6, minutes=minute - 30))

    async def owner_says(text: str, channel: str | None = None) -> None:
        await messages.add(
            Message(owner_id=OWNER, role="user", text=text, channel=channel, created_at=clock.now())
        )

    async def heartbeat(t: Thinker = main, trigger: str = "heartbeat") -> RoundRecord:
        return await t.run_round(OWNER, trigger)

    # 06:30 quiet hours, skip mode: no model call at all.
    await at(6, 30)
    await heartbeat(skip_quiet)
    # 06:40 quiet hours, critical_only: a routine thought is held...
    await at(6, 40)
    model.push(push("早安，今天有组会哦。"))
    await heartbeat()
    # 06:50 ...but a storm warning is critical and breaks them (no route known yet: web).
    await at(6, 50)
    model.push(push("暴雨预警，出门一定带伞。", "critical"))
    await heartbeat()
    # 07:30 the model has nothing to say; 07:40 nothing is new, so it is not asked again;
    # 07:45 a cron round always asks, and it says it badly.
    await at(7, 30)
    model.push("[我决定:no_push]")
    await heartbeat()
    await at(7, 40)
    await heartbeat()
    await at(7, 45)
    model.push("嗯……也许说点什么？")
    await heartbeat(trigger="cron")
    # 08:00 the owner writes from the phone; a heartbeat right after is skipped.
    await at(8, 0)
    await owner_says("在地铁上，好困", "phone")
    await at(8, 5)
    await heartbeat()
    # 08:20 while a round thinks, the owner writes again: suppressed owner_active.
    await at(8, 20)
    model.push(push("路上注意安全。"))
    original = model.complete

    async def owner_interrupts(
        msgs: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        await owner_says("到公司了", "phone")
        return await original(msgs, tools=tools)

    model.complete = owner_interrupts  # type: ignore[method-assign]
    await heartbeat()
    model.complete = original  # type: ignore[method-assign]
    # 09:00 busy: a routine push is held, a warning one goes to the phone.
    await at(9, 0)
    busy = RoundState(updated_at=clock.now(), availability=Availability.BUSY)
    state.reading = StaticState(busy).reading
    model.push(push("记得喝水。"))
    await heartbeat()
    await at(9, 10)
    model.push(push("十点组会，别忘了带电脑。", "warning"))
    await heartbeat()
    state.reading = StaticState().reading
    # 09:40 too soon after the last push.
    await at(9, 40)
    model.push(push("组会加油！"))
    await heartbeat()
    # 12:00 the same words again: duplicate.
    await at(12, 0)
    model.push(push("十点组会，别忘了带电脑！", "warning"))
    await heartbeat()
    # 12:30 an empty body, then a rambling one.
    await at(12, 30)
    model.push("[我决定:push]\n")
    await heartbeat()
    await at(12, 40)
    model.push(push("长" * 700))
    await heartbeat()
    # 13:00 the endpoint fails, then times out.
    await at(13, 0)
    model.push(ModelError("model endpoint answered HTTP 500"))
    await heartbeat()
    await at(13, 30)
    model.push(ModelTimeoutError("model endpoint timed out after 60s"))
    await heartbeat()
    # 14:30 the daemon restarts and greets; 17:00 the phone is down, and so is the web
    # session its one fallback try goes to: delivery_failed.
    await at(14, 30)
    model.push(push("我回来啦，下午好。"))
    await heartbeat(trigger="startup")
    await at(17, 0)
    phone.fail_next(3)
    web.fail_next(1)
    model.push(push("下班路上小心。"))
    await heartbeat()
    # 19:30 three pushes since the owner last wrote: only critical may pass now.
    await at(19, 30)
    model.push(push("晚饭想吃什么？"))
    await heartbeat()
    # 20:00 the owner answers; the database is locked when the gate reads history.
    await at(20, 0)
    await owner_says("刚到家", "phone")
    await at(20, 30)
    messages.fail_next = True
    model.push(push("辛苦啦。"))
    await heartbeat()
    # 20:45 a good-night note is the fifth push of the day.
    await at(20, 45)
    model.push(push("今晚早点睡吧。", "warning"))
    await heartbeat()
    # 21:30 nowhere to send: no connected channel (pre-gate), and the only channel gone
    # while the model thought (no route after the model).
    await at(21, 30)
    await heartbeat(nowhere)
    clock.advance(timedelta(minutes=1))
    model.push(push("晚安。"))
    model.drops = lone
    await unrouted.run_round("night-owner", "heartbeat")
    # 22:00 a round still thinking when the next heartbeat fires: busy.
    await at(22, 0)
    model.stall = asyncio.Event()
    model.push("[我决定:no_push]")
    first = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.05)
    clock.advance(timedelta(seconds=1))
    await heartbeat()
    model.stall.set()
    await first
    model.stall = None
    # 22:50 the daily cap is reached (a cron round: a heartbeat would see nothing new).
    await at(22, 50)
    model.push(push("明天见。", "warning"))
    await heartbeat(trigger="cron")

    model.assert_complete()
    found = await rounds.list(limit=100)
    await db.dispose()
    return list(reversed(found))


def main(argv: list[str]) -> int:
    """Play the day into the database file given on the command line."""
    path = Path(argv[0] if argv else "var/day.db")
    path.parent.mkdir(parents=True, exist_ok=True)
    records = asyncio.run(run_day(f"sqlite+aiosqlite:///{path}"))
    print(f"{len(records)} rounds written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
