"""Every way out of a round records what it reached: a bug, a database error, a shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from backthink.config import Settings
from backthink.errors import StoreError
from backthink.models import Message, Outcome, OwnerActivity
from backthink.records import Delivery, ModelMessage, ModelReply, RoundRecord
from backthink.round.recorder import INTERRUPTED_NOTE
from backthink.testing import (
    Calls,
    FakeClock,
    Rig,
    ScriptedModel,
    VolatileMessageStore,
    make_rig,
)

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
NOON = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai
PUSH = "[我决定:push]\n[紧急:warning]\n组会加油。"
LOOK = Calls([("capability_list", {})])
CRASH = "a bug: the gate's history came back in a shape nobody expected"
LOCKED = "database is locked"


def settings() -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "persona": {"id": "cyrene", "name": "昔涟"},
            "prompt": {"dir": str(PROMPTS)},
            "gate": {"default_channel": "web", "quiet_hours": ""},
        }
    )


class FailingGateHistory(VolatileMessageStore):
    """A message store whose read of the gate's history (the one that asks for pushes) fails.

    The tool loop's "did the owner write" read asks for no pushes, and still works.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def owner_activity(
        self, owner_id: str, *, messages: int, pushes: int, session_id: str = "main"
    ) -> OwnerActivity:
        if pushes:
            raise self.error
        return await super().owner_activity(
            owner_id, messages=messages, pushes=pushes, session_id=session_id
        )


class FailingOutbox:
    """An outbox whose commit fails with the given error."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def commit(self, delivery: Delivery, writeback: Message) -> bool:
        raise self.error


def round_failing_at(where: str, error: Exception) -> tuple[Rig, ScriptedModel]:
    """A rig whose round looks at a tool, decides to push, then meets `error` at `where`."""
    model = ScriptedModel(LOOK, PUSH)
    messages = FailingGateHistory(error) if where == "gate" else VolatileMessageStore()
    rig = make_rig(settings(), model=model, clock=FakeClock(NOON), messages=messages)
    if where == "hand-over":
        rig.dispatcher._outbox = FailingOutbox(error)  # type: ignore[assignment]
    return rig, model


def kept(record: RoundRecord) -> dict[str, Any]:
    """What a record keeps of the stages its round reached, outcome and notes aside."""
    fields = record.model_dump(
        exclude={"id", "outcome", "reason", "notes", "started_at", "finished_at"}
    )
    return {**fields, "tools": [use.name for use in record.tools]}


async def test_a_crash_in_the_gate_keeps_the_models_tokens_reply_and_decision() -> None:
    """A bug after the model replied is failed/internal_error, with its cost, reply and decision."""
    rig, model = round_failing_at("gate", RuntimeError(CRASH))
    record = await rig.thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.FAILED, "internal_error")
    assert record.prompt_tokens and record.completion_tokens and record.model == "scripted"
    assert record.raw_reply == PUSH
    assert (record.push, record.urgency, record.body) == (True, "warning", "组会加油。")
    assert [use.name for use in record.tools] == ["capability_list"]
    assert record.offered and record.digest is not None
    # A bug's message may hold anything: it goes to the log with its traceback, not the record.
    assert CRASH not in " ".join(record.notes)
    assert await rig.rounds.list() == [record]
    model.assert_complete()


@pytest.mark.parametrize("where", ["gate", "hand-over"])
async def test_a_store_error_and_a_crash_at_the_same_point_keep_the_same_things(
    where: str,
) -> None:
    """A database error and a bug at one point differ in reason and the error's note only."""
    store_rig, _ = round_failing_at(where, StoreError(LOCKED))
    crash_rig, _ = round_failing_at(where, RuntimeError(CRASH))
    failed = await store_rig.thinker.run_round("o", "heartbeat", round_id="r1")
    crashed = await crash_rig.thinker.run_round("o", "heartbeat", round_id="r1")
    assert (failed.outcome, failed.reason) == (Outcome.FAILED, "store_error")
    assert (crashed.outcome, crashed.reason) == (Outcome.FAILED, "internal_error")
    assert kept(failed) == kept(crashed)
    assert failed.notes == [*crashed.notes, LOCKED]
    assert crashed.raw_reply == PUSH and crashed.prompt_tokens and crashed.push is True


class HangsOnTheSecondTurn(ScriptedModel):
    """A model that answers its first call and never its second."""

    def __init__(self, *script: str | Calls) -> None:
        super().__init__(*script)
        self.waiting = asyncio.Event()

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        if self.calls:
            self.calls.append(list(messages))
            self.waiting.set()
            await asyncio.Event().wait()
        return await super().complete(messages, tools=tools)


async def test_a_round_cut_off_in_the_tool_loop_keeps_the_calls_it_made() -> None:
    """Cancelled mid-loop: recorded failed/interrupted with its tool calls, then cancelled."""
    model = HangsOnTheSecondTurn(LOOK)
    rig = make_rig(settings(), model=model, clock=FakeClock(NOON))
    task = asyncio.create_task(rig.thinker.run_round("o", "heartbeat"))
    async with asyncio.timeout(5):
        await model.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    [record] = await rig.rounds.list()
    assert (record.outcome, record.reason) == (Outcome.FAILED, "interrupted")
    assert [use.name for use in record.tools] == ["capability_list"]
    assert record.notes[-1] == INTERRUPTED_NOTE
    assert record.digest is not None and record.raw_reply is None
