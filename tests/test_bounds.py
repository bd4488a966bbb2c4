"""Bounded input: a huge message, persona, trigger or state file never makes a huge request."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.settings import make_settings

from backthink.config import Settings
from backthink.models import RoundState, ScheduleItem
from backthink.records import ModelMessage
from backthink.testing import (
    FakeClock,
    ScriptedModel,
    StaticState,
    VolatileMessageStore,
    make_rig,
    seed_history,
)

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
NO_PUSH = "[我决定:no_push]"
SPEAKER_NOTE = "[发言归属] "


def settings(*, tools: bool = True, **prompt: Any) -> Settings:
    return make_settings(prompt=prompt, tools={"enabled": tools})


async def seeded(items: list[tuple[str, str, str | None]]) -> VolatileMessageStore:
    store = VolatileMessageStore()
    await seed_history(store, items, start=T0 - timedelta(hours=5))
    return store


def total_chars(messages: list[ModelMessage]) -> int:
    return sum(len(m.text) for m in messages)


async def test_a_long_message_is_cut_with_a_visible_marker() -> None:
    """A message past prompt.message_chars keeps its head and says how much was cut."""
    store = await seeded([("user", "早", None), ("user", "长" * 10_000, None)])
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(settings(message_chars=1000), model=model, messages=store, clock=FakeClock(T0))
    record = await rig.thinker.run_round("o", "heartbeat")
    sent = model.calls[0]
    cut = sent[-2].text
    assert cut.startswith("长" * 1000)
    assert cut.endswith("…[截断：还有 9000 个字符]")
    assert len(cut) < 1100
    assert sent[-3].text == "早"
    assert "history_trimmed: dropped 0 oldest, cut 1" in record.notes


async def test_the_cut_marker_speaks_the_prompt_language() -> None:
    """With language = en the marker is English."""
    store = await seeded([("user", "x" * 5000, None)])
    model = ScriptedModel("[decision:no_push]")
    rig = make_rig(
        settings(language="en", message_chars=200), model=model, messages=store, clock=FakeClock(T0)
    )
    await rig.thinker.run_round("o", "heartbeat")
    assert model.calls[0][-2].text == "x" * 200 + "…[cut: 4800 more characters]"


async def test_the_whole_request_stays_within_max_chars_dropping_the_oldest() -> None:
    """Over prompt.max_chars the oldest history goes first; persona and prompt always stay."""
    items = [("user", f"{i:02d}" + "话" * 998, None) for i in range(20)]
    store = await seeded(items)
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(
        settings(max_chars=8000),
        model=model,
        messages=store,
        clock=FakeClock(T0),
        persona_prompt="你是昔涟。",
    )
    record = await rig.thinker.run_round("o", "heartbeat")
    sent = model.calls[0]
    assert total_chars(sent) <= 8000
    assert sent[0].text == "你是昔涟。"
    assert "[我决定:push]" in sent[-1].text
    history = [m.text[:2] for m in sent[1:-1] if m.role == "user"]
    assert history and history == [f"{i:02d}" for i in range(20 - len(history), 20)]
    dropped = 20 - len(history)
    assert f"history_trimmed: dropped {dropped} oldest, cut 0" in record.notes


async def test_attribution_notes_follow_the_kept_messages() -> None:
    """Dropping the only message of another persona removes its notes too: no orphan notes."""
    items: list[tuple[str, str, str | None]] = [("assistant", "我来啦" + "！" * 3000, "march7")]
    items += [("user", f"u{i}" + "嗯" * 800, None) for i in range(6)]
    store = await seeded(items)
    model = ScriptedModel(NO_PUSH)
    # Without tools, no share of the budget is kept for tool steps: six messages fit.
    rig = make_rig(
        settings(max_chars=7000, tools=False), model=model, messages=store, clock=FakeClock(T0)
    )
    await rig.thinker.run_round("o", "heartbeat")
    sent = model.calls[0]
    assert total_chars(sent) <= 7000
    assert not any(m.text.startswith(("[会话角色] ", SPEAKER_NOTE)) for m in sent)
    assert [m.role for m in sent if not m.text.startswith("[时间] ")] == ["user"] * 7


async def test_dry_run_shows_the_same_bounded_request() -> None:
    """prepare (think --dry-run) builds exactly what the round sends, with the same notes."""
    store = await seeded([("user", "长" * 10_000, None)] * 3)
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(
        settings(max_chars=6000, message_chars=2500),
        model=model,
        messages=store,
        clock=FakeClock(T0),
    )
    request = await rig.thinker.prepare("o", "heartbeat")
    record = await rig.thinker.run_round("o", "heartbeat")
    assert request.messages == model.calls[0]
    assert [n for n in request.notes if n.startswith("history_trimmed")] == [
        n for n in record.notes if n.startswith("history_trimmed")
    ]


async def test_a_huge_persona_prompt_is_cut() -> None:
    """The persona prompt keeps at most a quarter of the budget, cut with a marker and noted."""
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(
        settings(max_chars=8000),
        model=model,
        clock=FakeClock(T0),
        persona_prompt="设" * 100_000,
    )
    record = await rig.thinker.run_round("o", "heartbeat")
    persona = model.calls[0][0].text
    assert persona.startswith("设" * 100)
    assert "截断" in persona and len(persona) <= 2000 + 40
    assert total_chars(model.calls[0]) <= 8000
    assert any(n.startswith("persona_prompt_cut") for n in record.notes)


async def test_a_huge_trigger_and_state_fields_are_bounded() -> None:
    """A long poke text and long state notes, facts and titles cannot flood the prompt."""
    state = RoundState(
        updated_at=T0,
        device={f"k{i}": "v" * 10_000 for i in range(100)},
        schedule=[ScheduleItem(at=T0 + timedelta(hours=1), title="t" * 10_000)],
        notes=["n" * 10_000] * 100,
    )
    model = ScriptedModel(NO_PUSH)
    rig = make_rig(settings(), model=model, clock=FakeClock(T0), state=StaticState(state))
    await rig.thinker.run_round("o", "日程" + "啊" * 100_000)
    prompt = model.calls[0][-1].text
    assert len(prompt) < 12_000
    assert "啊" * 400 in prompt and "啊" * 600 not in prompt


def test_cli_import_refuses_a_huge_text_and_keeps_nothing(workdir: Workdir) -> None:
    """messages import of a 1 MB+ text exits 2 with one line naming line and key; nothing stored."""
    path = workdir.path / "chat.jsonl"
    rows = [{"role": "user", "text": "早"}, {"role": "user", "text": "x" * 1_000_001}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    proc = workdir.cli("messages", "import", str(path), check=False)
    assert proc.returncode == 2
    assert proc.stderr == f"backthink: {path}:2: text: longer than 1000000 characters\n"
    dry = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    assert [m["role"] for m in dry["messages"]] == ["system", "user"]


def test_cli_dry_run_and_round_are_bounded(workdir: Workdir, fake: FakeOpenAI) -> None:
    """A 900k-character message: dry run and real round send the same cut request, noted."""
    path = workdir.path / "chat.jsonl"
    rows = [
        {"role": "user", "text": "早", "at": "2026-11-29T08:00:00+08:00"},
        {"role": "user", "text": "长" * 900_000, "at": "2026-11-29T08:01:00+08:00"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    workdir.cli("messages", "import", str(path))
    dry = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    texts = [m["content"] for m in dry["messages"]]
    assert sum(len(t) for t in texts) <= 48_000
    assert texts[1] == "[时间] 2026年11月29日 周日 08:00"
    assert texts[3] == "长" * 4000 + "…[截断：还有 896000 个字符]"
    workdir.think_json()
    (sent,) = fake.chat_requests
    # The instruction prompt carries the minute of the round; the rest is byte for byte.
    assert [m["content"] for m in sent.body["messages"]][:-1] == texts[:-1]
    (record,) = json.loads(workdir.cli("rounds", "--json").stdout)
    assert "history_trimmed: dropped 0 oldest, cut 1" in record["notes"]


async def test_a_reply_past_max_tokens_is_kept_cut_with_a_marker() -> None:
    """A reply longer than model.max_tokens allows is stored cut, head and footer, and noted."""
    reply = "想" * 2_000_000 + "\n[我决定:push]\n" + "好" * 700
    model = ScriptedModel(reply)
    s = settings()
    rig = make_rig(s, model=model, clock=FakeClock(T0))
    record = await rig.thinker.run_round("o", "heartbeat")
    limit = s.model.max_tokens * 16
    assert record.raw_reply is not None and len(record.raw_reply) <= limit
    assert record.raw_reply.startswith("想" * 100) and record.raw_reply.endswith("好" * 100)
    assert "characters cut: the reply is longer than model.max_tokens allows" in record.raw_reply
    assert f"reply_cut: kept {limit} of {len(reply)} characters" in " ".join(record.notes)
    assert record.reason == "body_too_long" and record.push is False
    stored = await rig.rounds.get(record.id)
    assert stored is not None and stored.raw_reply == record.raw_reply


async def test_a_body_far_too_long_is_kept_cut() -> None:
    """A body past max_body_chars is no push; its record keeps no more than the reply bound."""
    model = ScriptedModel("[我决定:push]\n" + "好" * 50_000)
    s = settings()
    rig = make_rig(s, model=model, clock=FakeClock(T0))
    record = await rig.thinker.run_round("o", "heartbeat")
    assert record.push is False and record.body is not None
    assert len(record.body) <= s.model.max_tokens * 16 and "characters cut" in record.body
