"""Prompt rendering: templates first, then trigger, local time and the state block last."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from backthink.errors import ConfigError
from backthink.models import Availability, RoundState, ScheduleItem
from backthink.round.prompts import PromptBook, render_prompt, render_state_block

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "backthink/prompts"
SH = ZoneInfo("Asia/Shanghai")
AT = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)  # 08:00 in Shanghai, a Monday

STATE = RoundState(
    updated_at=AT - timedelta(minutes=30),
    availability=Availability.BUSY,
    device={"battery": "23%", "charging": False},
    schedule=[
        ScheduleItem(at=AT + timedelta(hours=2), title="组会"),
        ScheduleItem(at=AT - timedelta(hours=1), title="past"),
        ScheduleItem(at=AT + timedelta(days=3), title="far"),
    ],
    notes=["昨晚睡得晚"],
)


def render(lang: str, trigger: str, state: RoundState | None) -> str:
    book = PromptBook.load(PROMPTS, lang)  # type: ignore[arg-type]
    return render_prompt(
        book,
        trigger=trigger,
        at=AT,
        tz=SH,
        state=state,
        channels=["web", "phone"],
        persona_name="昔涟",
        owner_name="开拓者",
    )


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_guidance_has_footer_trigger_time_and_state_at_end(lang: str) -> None:
    """The guidance names the footer and channels; trigger, time and state close the prompt."""
    text = render(lang, "heartbeat", STATE)
    decision = "[我决定:push]" if lang == "zh" else "[decision:push]"
    assert decision in text
    assert "web|phone|auto" in text
    assert "开拓者" in text
    head, _, tail = text.rpartition("\n\n")
    assert decision in head
    lines = tail.splitlines()
    assert lines[0] == ("触发：定时心跳" if lang == "zh" else "Trigger: scheduled heartbeat")
    assert "2026-11-30 08:00" in lines[1] and "Asia/Shanghai" in lines[1]
    assert lines[2] == ("[主人当前状态]" if lang == "zh" else "[Owner's current state]")
    assert "组会" in tail and "past" not in tail and "far" not in tail


def test_startup_prompt_is_used_for_startup() -> None:
    """The startup trigger selects the greeting template."""
    text = render("zh", "startup", None)
    assert "刚刚回来" in text
    assert "触发：进程启动" in text


def test_poke_text_is_named_verbatim() -> None:
    """A free-text trigger appears in the prompt as written."""
    assert "触发：日程「组会」10 分钟后开始" in render("zh", "日程「组会」10 分钟后开始", None)


def test_unknown_state_leaves_block_out() -> None:
    """With no state the block is absent, and nothing else changes."""
    with_state = render("zh", "heartbeat", STATE)
    without = render("zh", "heartbeat", None)
    assert "[主人当前状态]" not in without
    assert with_state.startswith(without)


def test_stable_prefix_between_heartbeats() -> None:
    """Two heartbeats an hour apart differ only in the last lines."""
    book = PromptBook.load(PROMPTS, "zh")
    a = render_prompt(
        book,
        trigger="heartbeat",
        at=AT,
        tz=SH,
        state=None,
        channels=["web"],
        persona_name="p",
        owner_name="o",
    )
    b = render_prompt(
        book,
        trigger="heartbeat",
        at=AT + timedelta(hours=1),
        tz=SH,
        state=None,
        channels=["web"],
        persona_name="p",
        owner_name="o",
    )
    prefix = len(_common_prefix(a, b))
    assert prefix > 0.9 * len(a)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_state_block_content() -> None:
    """The block lists availability, device facts, upcoming items and notes."""
    block = render_state_block(STATE, at=AT, tz=SH, language="zh")
    assert block.splitlines() == [
        "[主人当前状态]",
        "- 可用性：忙碌",
        "- 设备：battery=23%；charging=no",
        "- 接下来的日程：",
        "  - 10:00（2 小时 0 分钟后）组会",
        "- 备注：昨晚睡得晚",
        "- 状态更新于 07:30",
    ]


def test_missing_template_is_a_config_error(tmp_path: Path) -> None:
    """A prompt folder without templates fails with the path named."""
    with pytest.raises(ConfigError, match=r"guidance\.zh\.md"):
        PromptBook.load(tmp_path, "zh")
