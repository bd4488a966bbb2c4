"""Several days with the companion, end to end: it recalls what was said long ago, and follows
up on its own earlier thought.

Real SQLite, the real OpenAI client against the local fake endpoint, and a clock the test
moves: the owner mentions a piano contest on the first day, two hundred messages about
other things follow, and when the contest comes up again the companion remembers, thinks
about it, and says something the next morning.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from support.fake_openai import FakeOpenAI

from backthink.config import Settings
from backthink.host.app import AppOverrides
from backthink.host.fleet import open_app
from backthink.models import MemoryKind, Message, Outcome
from backthink.testing import FakeClock, proactive_messages

ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # 20:00 in Shanghai
FACT = "下周三我要去参加市里的钢琴比赛，弹肖邦的夜曲，想想就紧张。"
THOUGHT = "她明天就要钢琴比赛了，今晚很紧张。现在别打扰她练琴，明早比赛前给她打打气。"
BODY = "今天的钢琴比赛加油！夜曲你练了那么久，放松弹就好。"

_TOPICS = (
    "公司的报销单又被退回来了",
    "楼下新开了一家拉面馆",
    "这周的健身计划只完成了一半",
    "地铁今天特别挤",
    "周末想把阳台的花换个盆",
    "同事推荐了一部科幻电影",
    "晚饭做了番茄炒蛋",
    "快递放在驿站忘了拿",
    "明天降温要多穿点",
    "读完了那本讲城市历史的书",
)


def settings(tmp_path: Path, base_url: str) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "name": "小满", "timezone": "Asia/Shanghai"},
            "persona": {"id": "cyrene", "name": "昔涟"},
            "model": {"base_url": base_url, "api_key": "sk-test", "max_retries": 0},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'days.db'}"},
            "prompt": {"dir": str(ROOT / "backthink/prompts"), "language": "zh"},
            "gate": {"quiet_hours": "", "min_interval": "0s", "default_channel": "web"},
            "state": {"file": str(tmp_path / "absent.json")},
            "daemon": {"socket": str(tmp_path / "s.sock")},
        }
    )


def filler(i: int) -> str:
    """An everyday message that never mentions the contest."""
    return f"{_TOPICS[i % len(_TOPICS)]}，第{i}天记一笔。"


async def test_days_of_memory(tmp_path: Path, fake: FakeOpenAI) -> None:
    clock = FakeClock(START)
    overrides = AppOverrides(clock=clock)
    async with open_app(settings(tmp_path, fake.base_url), overrides=overrides) as app:
        at = START
        await app.messages.add(Message(owner_id="o", role="user", text=FACT, created_at=at))
        for i in range(200):
            at += timedelta(minutes=30)
            role = "user" if i % 2 == 0 else "assistant"
            speaker = None if role == "user" else "cyrene"
            await app.messages.add(
                Message(owner_id="o", role=role, text=filler(i), speaker=speaker, created_at=at)
            )

        # Day 4: the window is about everyday things; the contest is not brought to mind.
        clock.set(at + timedelta(minutes=10))
        fake.script("[我决定:no_push]")
        ordinary = await app.thinker.run_round("o", "heartbeat")
        assert ordinary.reason == "no_push"
        assert "钢琴比赛" not in fake.chat_requests[-1].body["messages"][-1]["content"]

        # The evening before the contest the owner talks about it again.
        at = datetime(2026, 11, 25, 13, 0, tzinfo=UTC)  # 21:00 in Shanghai
        again = "明天的钢琴比赛好紧张，手都在抖。"
        await app.messages.add(Message(owner_id="o", role="user", text=again, created_at=at))
        clock.set(at + timedelta(minutes=30))
        fake.script(f"{THOUGHT}\n[我决定:no_push]")
        evening = await app.thinker.run_round("o", "heartbeat")
        assert (evening.outcome, evening.reason) == (Outcome.SUPPRESSED, "no_push")
        request = fake.chat_requests[-1].body["messages"]
        prompt = request[-1]["content"]
        assert "[想起的旧事]\n- 2026-11-20 主人说：" + FACT in prompt
        # Recalled from far outside the window: the window itself does not hold it.
        assert all(FACT not in str(m["content"]) for m in request[:-1])

        # The next morning the companion follows up on its own thought.
        clock.set(datetime(2026, 11, 26, 0, 30, tzinfo=UTC))  # 08:30 in Shanghai
        fake.script(f"昨晚想好了，比赛前给她打气。\n[我决定:push]\n{BODY}")
        morning = await app.thinker.run_round("o", "heartbeat")
        assert (morning.outcome, morning.reason) == (Outcome.DELIVERED, "web")
        prompt = fake.chat_requests[-1].body["messages"][-1]["content"]
        assert f"[你之前的想法]\n- 11-25 21:30 {THOUGHT}" in prompt

        pushed = await proactive_messages(app.messages, "o", 5)
        assert [m.text for m in pushed] == [BODY]
        thoughts = await app.memories.list("o", kind=MemoryKind.THOUGHT)
        assert [t.round_id for t in thoughts] == [morning.id, evening.id]
        assert all(t.text not in m.text for t in thoughts for m in pushed)
