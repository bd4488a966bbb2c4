"""One round at a time per owner, whatever hosts it: apps rebuilt mid-round, two processes on PG.

The registry of live turns belongs to the fleet (one per process), so an app
rebuilt when the owner's row changes still finds the owner's round; on
PostgreSQL a round also holds its owner's advisory lock, so two fleets on one
database (two workers) never run one owner's rounds side by side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import ROOT

from backthink.config import Settings
from backthink.host.app import AppOverrides
from backthink.host.fleet import open_fleet
from backthink.host.live import LiveStatus
from backthink.host.status import Status, owner_status
from backthink.host.turns import InFlight, LiveTurns
from backthink.models import Outcome, Owner
from backthink.records import ModelMessage, ModelReply
from backthink.store import open_database
from backthink.store.turn_locks import lock_key, round_running
from backthink.testing import FakeClock, ScriptedModel

NO_PUSH = "[我决定:no_push]"
WAIT_S = 10.0  # seconds anything awaited may take on a loaded machine


class HeldModel(ScriptedModel):
    """A scripted model whose every answer waits until the test lets it go."""

    def __init__(self, *replies: str) -> None:
        super().__init__(*replies)
        self.asked = asyncio.Event()
        self.asks = 0
        self.release = asyncio.Event()

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        self.asks += 1
        self.asked.set()
        await self.release.wait()
        return await super().complete(messages, tools=tools)


def settings(url: str, **sections: Any) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "persona": {"id": "cyrene", "name": "昔涟"},
            "database": {"url": url},
            "prompt": {"dir": str(ROOT / "backthink/prompts")},
            "state": {"file": ""},
            "gate": {"quiet_hours": "", "default_channel": "web"},
            "channels": {"web": {"type": "web"}},
            "memory": {"enabled": False},
            "tools": {"enabled": False},
            **sections,
        }
    )


async def test_a_round_holds_its_owner_across_an_app_rebuilt_mid_round(tmp_path: Path) -> None:
    """The owner's row changes mid-round: the new app's round ends skipped/busy, no second run."""
    model = HeldModel(NO_PUSH, NO_PUSH)
    url = f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    config = settings(url)
    async with (
        open_fleet(config, AppOverrides(model=model, clock=FakeClock())) as fleet,
        open_database(config.database) as db,
    ):
        owners = db.owners
        await owners.put(Owner(id="p", name="Pat", timezone="UTC"), at=fleet.clock.now())
        first_app = await fleet.app("p")
        first = asyncio.create_task(first_app.thinker.run_round("p", "heartbeat"))
        await asyncio.wait_for(model.asked.wait(), WAIT_S)
        assert fleet.turns.in_flight("p") == InFlight(rounds=1)

        await owners.put(Owner(id="p", name="Patricia", timezone="UTC"), at=fleet.clock.now())
        second_app = await fleet.app("p")
        assert second_app is not first_app and second_app.thinker is not first_app.thinker
        second = await second_app.thinker.run_round("p", "heartbeat")
        assert (second.outcome, second.reason) == (Outcome.SKIPPED, "busy")
        assert model.asks == 1

        model.release.set()
        assert (await asyncio.wait_for(first, WAIT_S)).reason == "no_push"
        assert fleet.turns.in_flight("p") == InFlight()
        third = await second_app.thinker.run_round("p", "poke")
        assert third.reason == "no_push"


async def test_a_queued_slot_met_busy_leaves_the_slot_id_to_the_round_holding_it() -> None:
    """A slot run again while its first run holds the owner: its busy record gets its own id."""
    model = HeldModel(NO_PUSH)
    async with open_fleet(
        settings("sqlite+aiosqlite:///:memory:"), AppOverrides(model=model, clock=FakeClock())
    ) as fleet:
        app = await fleet.app("o")
        first = asyncio.create_task(app.thinker.run_round("o", "heartbeat", round_id="slot-1"))
        await asyncio.wait_for(model.asked.wait(), WAIT_S)
        again = await app.thinker.run_round("o", "heartbeat", round_id="slot-1")
        assert (again.outcome, again.reason) == (Outcome.SKIPPED, "busy")
        assert again.id != "slot-1" and any("slot-1" in note for note in again.notes)
        model.release.set()
        done = await asyncio.wait_for(first, WAIT_S)
        assert (done.id, done.reason) == ("slot-1", "no_push")
        assert (await app.rounds.get("slot-1")) == done


async def test_two_fleets_on_postgres_never_run_one_owner_side_by_side(pg_url: str) -> None:
    """Two workers take the same owner: the second round ends skipped/busy until the first ends."""
    first_model, second_model = HeldModel(NO_PUSH), ScriptedModel(NO_PUSH, NO_PUSH)
    config = settings(pg_url, owners={"q": {"timezone": "UTC"}})
    async with (
        open_fleet(config, AppOverrides(model=first_model, clock=FakeClock())) as one,
        open_fleet(config, AppOverrides(model=second_model, clock=FakeClock())) as two,
        open_database(config.database) as db,
    ):
        assert one.turns is not two.turns
        app_one, app_two = await one.app("o"), await two.app("o")
        running = asyncio.create_task(app_one.thinker.run_round("o", "heartbeat"))
        await asyncio.wait_for(first_model.asked.wait(), WAIT_S)
        assert await round_running(db.db.engine, "o")

        busy = await app_two.thinker.run_round("o", "heartbeat")
        assert (busy.outcome, busy.reason) == (Outcome.SKIPPED, "busy")
        assert second_model.calls == []
        other = await (await two.app("q")).thinker.run_round("q", "heartbeat")
        assert other.reason == "no_push"  # another owner is not held up

        first_model.release.set()
        assert (await asyncio.wait_for(running, WAIT_S)).reason == "no_push"
        assert not await round_running(db.db.engine, "o")
        after = await app_two.thinker.run_round("o", "poke")
        assert after.reason == "no_push"


def cut_lock_connections(pg_url: str) -> int:
    """Terminate every backend that holds an advisory lock, as a network cut would; how many."""
    conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
        ).fetchall()
    return len(rows)


async def test_a_round_cut_off_or_its_lock_connection_cut_leaves_no_owner_locked(
    pg_url: str,
) -> None:
    """A cancelled round lets go of its lock; a cut lock connection is opened again at the next."""
    model = HeldModel(NO_PUSH, NO_PUSH)
    config = settings(pg_url)
    async with (
        open_fleet(config, AppOverrides(model=model, clock=FakeClock())) as fleet,
        open_database(config.database) as db,
    ):
        app = await fleet.app("o")
        engine = db.db.engine
        cut = asyncio.create_task(app.thinker.run_round("o", "heartbeat"))
        await asyncio.wait_for(model.asked.wait(), WAIT_S)
        assert await round_running(engine, "o")
        cut.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cut
        assert not await round_running(engine, "o")
        assert fleet.turns.in_flight("o") == InFlight()

        model.asked.clear()
        held = asyncio.create_task(app.thinker.run_round("o", "poke"))
        await asyncio.wait_for(model.asked.wait(), WAIT_S)
        assert cut_lock_connections(pg_url) == 1
        model.release.set()
        # Its lock went with the connection; giving it back finds nothing to do.
        assert (await asyncio.wait_for(held, WAIT_S)).reason == "no_push"
        model.push(NO_PUSH)
        again = asyncio.create_task(app.thinker.run_round("o", "poke"))
        assert (await asyncio.wait_for(again, WAIT_S)).reason == "no_push"
        assert not await round_running(engine, "o")


def test_a_lock_key_is_the_owners_own() -> None:
    """Keys are 64-bit, stable and differ between owners (a shared key would serialise two)."""
    keys = {lock_key(f"owner-{i}") for i in range(10_000)}
    assert len(keys) == 10_000
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert lock_key("o") == lock_key("o")


async def test_relay_turns_are_counted_and_forgotten_once_over() -> None:
    """Each relay turn sees the others in flight when it arrives; ended ones leave no trace."""
    turns = LiveTurns()
    first = turns.relay("o", "m-1")
    first.asking()
    second = turns.relay("o", None)
    second.streamed(12, ["search"])
    third = turns.relay("o", "m-3")
    assert first.alongside == () and len(second.alongside) == 1
    assert [(v.client_id, v.stage, v.chars, v.tools) for v in third.alongside] == [
        ("m-1", "waiting", 0, ()),
        (None, "streaming", 12, ("search",)),
    ]
    assert turns.in_flight("o") == InFlight(relay=3) and turns.in_flight("p") == InFlight()
    for turn in (first, second, third, third):
        turn.end()
    assert turns.in_flight("o") == InFlight()
    assert not turns._owners  # nothing kept for an owner with nothing in flight


async def test_a_round_yields_to_a_relay_turn_begun_during_it() -> None:
    """A hold is overtaken by a relay turn under way or begun since, not by one ended before it."""
    turns = LiveTurns()
    before = turns.relay("o", None)
    before.end()
    async with turns.round("o") as hold:
        assert hold is not None and not hold.overtaken()
        async with turns.round("o") as second:
            assert second is None
        turn = turns.relay("o", None)
        assert hold.overtaken()
        turn.end()
        assert hold.overtaken()  # it began during the round: the owner is talking
    async with turns.round("o") as hold:
        assert hold is not None and not hold.overtaken()


async def test_status_shows_the_turns_in_flight(tmp_path: Path) -> None:
    """The daemon's count reaches `status` (text and JSON); a round held elsewhere counts too."""
    live = LiveStatus.from_json({"next_heartbeat": None, "channels": {}, "turns": {"relay": 2}})
    assert live.turns == {"relay": 2}
    assert LiveStatus.from_json(live.to_json()) == live
    assert LiveStatus.from_json({"turns": {"rounds": True, "relay": -1}}).turns == {}
    config = settings(f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}")
    async with (
        open_fleet(config, AppOverrides(model=None, clock=FakeClock())) as fleet,
        open_database(config.database) as stores,
    ):
        found = await owner_status(
            config,
            "o",
            at=fleet.clock.now(),
            rounds=stores.rounds,
            outbox=stores.outbox,
            marks=stores.marks,
            live=live,
            model="ok",
            round_elsewhere=True,
        )
    assert found.to_json()["turns_in_flight"] == {"rounds": 1, "relay": 2}
    assert "turns       a round and 2 relay turns in flight" in found.render(config.owner.tz)
    idle = Status(
        running=False, pause=found.pause, next_heartbeat=None, last_round=None, pending_deliveries=0
    )
    assert idle.to_json()["turns_in_flight"] == {"rounds": 0, "relay": 0}
    assert idle.render(config.owner.tz).endswith("turns       none in flight")
