"""A round end to end with fakes: request shape, outcome and reason, degradation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from backthink.config import Settings
from backthink.errors import ModelError, ModelTimeoutError, StoreError
from backthink.models import Availability, Outcome, RoundState, SessionView
from backthink.records import ModelMessage
from backthink.round.thinker import Thinker
from backthink.testing import (
    FakeClock,
    ScriptedModel,
    StaticState,
    VolatileMessageStore,
    VolatileRoundStore,
    make_rig,
    seed_history,
)

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
PUSH = "[我决定:push]\n[紧急:warning]\n记得十点的组会哦。"


def settings(**gate: object) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "name": "开拓者", "timezone": "Asia/Shanghai"},
            "persona": {"id": "cyrene", "name": "昔涟"},
            "prompt": {"dir": str(PROMPTS)},
            "gate": {"default_channel": "web", **gate},
        }
    )


class BrokenStore(VolatileMessageStore):
    """A message store whose history reads fail."""

    async def session_view(
        self, owner_id: str, limit: int, *, session_id: str = "main"
    ) -> SessionView:
        raise StoreError("database is locked")


def make(
    model: ScriptedModel | None,
    *,
    store: VolatileMessageStore | None = None,
    state: RoundState | None = None,
    s: Settings | None = None,
) -> tuple[Thinker, VolatileRoundStore]:
    rig = make_rig(
        s or settings(),
        model=model,
        messages=store,
        state=StaticState(state),
        clock=FakeClock(T0),
        persona_prompt="你是昔涟。",
    )
    return rig.thinker, rig.rounds


async def seed(store: VolatileMessageStore, items: Sequence[tuple[str, str, str | None]]) -> None:
    await seed_history(store, items, start=T0 - timedelta(minutes=60))


async def test_request_order_and_placement() -> None:
    """Persona first, then role context and history, then the prompt with state at its end."""
    store = VolatileMessageStore()
    await seed(store, [("user", "早", None), ("assistant", "早上好", "aglaea")])
    model = ScriptedModel("[我决定:no_push]")
    state = RoundState(updated_at=T0, availability=Availability.AVAILABLE)
    thinker, rounds = make(model, store=store, state=state)
    record = await thinker.run_round("o", "heartbeat")
    (sent,) = model.calls
    roles = [m.role for m in sent]
    assert roles == ["system", "system", "system", "user", "system", "assistant", "user"]
    assert sent[0] == ModelMessage(role="system", text="你是昔涟。")
    assert sent[1].text.startswith("[会话角色] ")
    assert sent[2].text == "[时间] 2026年11月30日 周一 09:00"  # the window's first message
    assert sent[3].text == "早"
    assert sent[4].text == "[发言归属] 以下发言来自「aglaea」，不是你说的。"
    assert sent[-1].text.rstrip().endswith("- 状态更新于 10:00")
    assert "触发：定时心跳" in sent[-1].text
    assert (record.outcome, record.reason) == (Outcome.SUPPRESSED, "no_push")
    assert await rounds.list() == [record]
    model.assert_complete()


async def test_the_dry_run_shows_the_request_the_round_sends() -> None:
    """`think --dry-run` and the round build one request: the same messages, byte for byte."""
    store = VolatileMessageStore()
    await seed(store, [("user", "早", None), ("assistant", "早上好", "aglaea")])
    model = ScriptedModel("[我决定:no_push]")
    thinker, _ = make(model, store=store, state=RoundState(updated_at=T0, notes=["在图书馆"]))
    shown = await thinker.prepare("o", "heartbeat")
    await thinker.run_round("o", "heartbeat")
    assert model.calls == [shown.messages]


async def test_recent_window_is_limited() -> None:
    """Only the last prompt.recent_messages messages are sent, oldest first."""
    store = VolatileMessageStore()
    await seed(store, [("user", f"m{i}", None) for i in range(30)])
    model = ScriptedModel("[我决定:no_push]")
    thinker, _ = make(model, store=store)
    await thinker.run_round("o", "heartbeat")
    texts = [m.text for m in model.calls[0] if m.role == "user"][:-1]
    assert texts == [f"m{i}" for i in range(10, 30)]


@pytest.mark.parametrize(
    ("reply", "outcome", "reason"),
    [
        ("[我决定:no_push]", Outcome.SUPPRESSED, "no_push"),
        ("无", Outcome.SUPPRESSED, "no_push"),
        ("I think I should say hi.", Outcome.SUPPRESSED, "parse_failed"),
        ("[我决定:push]\n", Outcome.SUPPRESSED, "empty_body"),
        ("[我决定:push]\n" + "长" * 700, Outcome.SUPPRESSED, "body_too_long"),
        (PUSH, Outcome.DELIVERED, "web"),
    ],
)
async def test_outcomes(reply: str, outcome: Outcome, reason: str) -> None:
    """Each kind of reply ends with the documented outcome and reason."""
    thinker, _ = make(ScriptedModel(reply))
    record = await thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (outcome, reason)
    assert record.raw_reply == reply


async def test_push_decision_is_recorded() -> None:
    """The decision fields and usage land in the record."""
    thinker, _ = make(ScriptedModel(PUSH))
    record = await thinker.run_round("o", "heartbeat")
    assert record.push is True and record.urgency is not None and record.urgency.value == "warning"
    assert record.body == "记得十点的组会哦。"
    assert record.prompt_tokens and record.completion_tokens


@pytest.mark.parametrize(
    ("error", "reason"),
    [(ModelTimeoutError("slow"), "model_timeout"), (ModelError("HTTP 500"), "model_error")],
)
async def test_model_failures(error: ModelError, reason: str) -> None:
    """A failing model ends the round failed with the right reason and the error noted."""
    thinker, rounds = make(ScriptedModel(error))
    record = await thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.FAILED, reason)
    assert str(error) in record.notes
    assert len(await rounds.list()) == 1


async def test_no_model_configured() -> None:
    """Without an endpoint the round is skipped before any read and says what is missing."""
    thinker, _ = make(None, store=BrokenStore())
    record = await thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.SKIPPED, "no_model")
    (note,) = record.notes
    assert note.startswith("no model endpoint configured: set model.base_url")


async def test_history_read_failure_fails_the_round_before_the_model() -> None:
    """A failing history read ends the round failed/store_error; no model call is paid for."""
    model = ScriptedModel("[我决定:no_push]")
    thinker, rounds = make(model, store=BrokenStore())
    record = await thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.FAILED, "store_error")
    assert record.notes == ["database is locked"]
    assert model.calls == []
    assert await rounds.list() == [record]


async def test_prepare_fails_when_the_history_cannot_be_read() -> None:
    """A dry run whose history read fails says so: no request is shown without its history."""
    thinker, _ = make(ScriptedModel("[我决定:no_push]"), store=BrokenStore())
    with pytest.raises(StoreError, match="database is locked"):
        await thinker.prepare("o", "heartbeat")


async def test_startup_uses_startup_prompt() -> None:
    """The startup trigger sends the greeting prompt."""
    model = ScriptedModel("[我决定:no_push]")
    thinker, _ = make(model)
    await thinker.run_round("o", "startup")
    assert "刚刚回来" in model.calls[0][-1].text


async def test_english_prompt() -> None:
    """language = en sends the English templates."""
    s = Settings.model_validate({"prompt": {"dir": str(PROMPTS), "language": "en"}})
    model = ScriptedModel("[decision:no_push]")
    thinker, _ = make(model, s=s)
    record = await thinker.run_round("o", "heartbeat")
    assert "[decision:push]" in model.calls[0][-1].text
    assert record.reason == "no_push"
