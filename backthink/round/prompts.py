"""The round's instruction prompt: an editable template, the memory block, then trigger, time
and state.

Stable text comes first and the per-round text comes last: the memory block
changes only when a new thought was kept or the window moved, the trigger,
local time and owner state every round. Two consecutive heartbeats so share a
long byte-identical prefix and providers' prompt caches can hit.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib.resources.abc import Traversable
from typing import Any
from zoneinfo import ZoneInfo

from backthink.decision.inert import inert
from backthink.decision.tags import has_tags
from backthink.errors import ConfigError
from backthink.models import Language, RoundState, Trigger

TEMPLATE_NAMES = ("guidance", "startup")
MAX_SCHEDULE_ITEMS = 5
SCHEDULE_HORIZON = timedelta(hours=24)
# The state file is written by other programs, so every part of its block is bounded:
# a runaway note or device fact must not crowd the conversation out of the budget.
MAX_DEVICE_FACTS = 12
MAX_NOTES = 5
STATE_KEY_CHARS = 40  # characters of a device fact's name
STATE_TEXT_CHARS = 200  # characters of a fact's value, a schedule title or a note
TRIGGER_CHARS = 500  # characters of a free-text trigger (a poke's text)
OWNER_NAME_CHARS = 40  # characters of the owner's name

_WEEKDAYS = {
    "zh": ("周一", "周二", "周三", "周四", "周五", "周六", "周日"),
    "en": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
}

_LABELS: dict[str, dict[str, str]] = {
    "zh": {
        "trigger": "触发：{}",
        "now": "现在是主人当地时间 {} {}（{}）。",
        "header": "[主人当前状态]",
        "availability": "- 可用性：{}",
        "device": "- 设备：{}",
        "schedule": "- 接下来的日程：",
        "item": "  - {}（{}后）{}",
        "notes": "- 备注：{}",
        "updated": "- 状态更新于 {}",
        "sep": "；",
        "available": "空闲",
        "busy": "忙碌",
        "dnd": "勿扰",
        "heartbeat": "定时心跳",
        "startup": "进程启动——你刚从一次重启中醒来，回到主人身边",
        "cron": "定时计划",
    },
    "en": {
        "trigger": "Trigger: {}",
        "now": "The owner's local time is now {} {} ({}).",
        "header": "[Owner's current state]",
        "availability": "- Availability: {}",
        "device": "- Device: {}",
        "schedule": "- Upcoming schedule:",
        "item": "  - {} (in {}) {}",
        "notes": "- Notes: {}",
        "updated": "- State updated at {}",
        "sep": "; ",
        "available": "available",
        "busy": "busy",
        "dnd": "do not disturb",
        "heartbeat": "scheduled heartbeat",
        "startup": "process start: you just came back from a restart",
        "cron": "scheduled time",
    },
}


# In json_schema mode the reply is one JSON object instead of the footer; this takes
# the place of the template's footer paragraph (its last one, the one with the tags).
_JSON_INSTRUCTION = {
    "zh": (
        "最后只回答一个 JSON 对象，不要别的：不写结尾标记行，不加代码块，对象前后不写任何文字。"
        "它的字段依次是：\n"
        '"thought"：你自己的思考，一两句话，永远不会发给TA\n'
        '"decision"："push" 或 "no_push"\n'
        '"channel"：{channels} 之一（auto 时会发到TA最近活跃的那个渠道，永远只发一个渠道）\n'
        '"urgency"："routine"、"warning" 或 "critical"（只有必须立刻告诉TA、'
        "哪怕TA在休息也要打扰的事才写 critical，普通的关心写 routine）\n"
        '"body"：你要对TA说的话，一到两句；不推送时写 ""。只有 body 会发给TA。'
    ),
    "en": (
        "Then answer with one JSON object and nothing else: no footer lines, no code fence, "
        "no text around it. Its fields, in this order:\n"
        '"thought": your own thinking, a sentence or two; it is never sent\n'
        '"decision": "push" or "no_push"\n'
        '"channel": one of {channels} (with auto, the message goes to the one channel they '
        "used most recently, never to several)\n"
        '"urgency": "routine", "warning" or "critical" (critical only for something they must '
        'know at once, even while resting; "routine" for ordinary care)\n'
        '"body": what you want to say to them, one or two sentences; "" when you do not push. '
        "Only the body is ever sent."
    ),
}


def with_json_instruction(text: str, *, language: Language, channels: str) -> str:
    """Swap a rendered template's footer paragraph for the JSON answer instruction.

    The footer paragraph is the last one, when it shows footer tags; a custom
    template without one gets the instruction added at its end instead.
    """
    instruction = _JSON_INSTRUCTION[language].format(channels=channels)
    head, sep, last = text.rpartition("\n\n")
    if sep and has_tags(last):
        return f"{head}\n\n{instruction}"
    if not sep and has_tags(text):
        return instruction
    return f"{text}\n\n{instruction}"


@dataclass(frozen=True)
class PromptBook:
    """The two instruction templates of one language, loaded from the prompt folder."""

    language: Language
    guidance: string.Template
    startup: string.Template

    @classmethod
    def load(cls, folder: Traversable, language: Language) -> PromptBook:
        """Read `guidance.<lang>.md` and `startup.<lang>.md` from `folder`.

        `folder` is a directory (`prompt.dir`) or the package's own templates
        (`backthink.config.shipped.prompt_templates()`).

        Raises:
            ConfigError: a template is missing or unreadable.
        """
        texts: dict[str, string.Template] = {}
        for name in TEMPLATE_NAMES:
            path = folder / f"{name}.{language}.md"
            try:
                texts[name] = string.Template(path.read_text(encoding="utf-8").strip())
            except (OSError, UnicodeDecodeError) as exc:
                problem = getattr(exc, "strerror", None) or str(exc)
                raise ConfigError(f"prompt.dir: cannot read template {path}: {problem}") from None
        return cls(language=language, guidance=texts["guidance"], startup=texts["startup"])


def owner_display_name(name: str, language: Language) -> str:
    """How prompts name the owner: their name, else a plain word of the language.

    The name may come from the owner table, which other programs write too:
    it is shown as one inert line of at most OWNER_NAME_CHARS characters.
    """
    return inert(name, OWNER_NAME_CHARS) or ("主人" if language == "zh" else "your owner")


def is_startup(trigger: str) -> bool:
    """True when the trigger asks for the startup greeting."""
    return Trigger.of(trigger) is Trigger.STARTUP


def render_prompt(
    book: PromptBook,
    *,
    trigger: str,
    at: datetime,
    tz: ZoneInfo,
    state: RoundState | None,
    channels: Sequence[str],
    persona_name: str,
    owner_name: str,
    memory: str = "",
    output: str = "footer",
) -> str:
    """Render the instruction prompt of one round.

    Args:
        book: the templates.
        trigger: why this round runs (heartbeat, startup, cron, or a poke's text).
        at: the round's instant (aware).
        tz: the owner's time zone.
        state: the owner's state snapshot, or None when unknown (the block is left out).
        channels: the configured channel names the model may name.
        persona_name: display name of the persona.
        owner_name: display name of the owner.
        memory: the rendered memory block (recalled items and journal), or "";
            it goes between the template and the trigger line.
        output: `footer` keeps the template as written; `json_schema` asks for the
            JSON object in place of its footer paragraph.
    """
    labels = _LABELS[book.language]
    template = book.startup if is_startup(trigger) else book.guidance
    names = "|".join([*channels, "auto"])
    body = template.safe_substitute(
        persona_name=persona_name, owner_name=owner_name, channels=names
    )
    if output == "json_schema":
        body = with_json_instruction(body, language=book.language, channels=names)
    local = at.astimezone(tz)
    tail = [
        labels["trigger"].format(describe_trigger(trigger, book.language)),
        labels["now"].format(
            local.strftime("%Y-%m-%d %H:%M"), _WEEKDAYS[book.language][local.weekday()], tz.key
        ),
    ]
    if state is not None:
        tail.append(render_state_block(state, at=at, tz=tz, language=book.language))
    head = f"{body}\n\n{memory}" if memory else body
    return head + "\n\n" + "\n".join(tail)


def describe_trigger(trigger: str, language: Language) -> str:
    """Name the trigger for the model; free text (a poke) is passed through as written."""
    kind = Trigger.of(trigger)
    if kind is Trigger.POKE:
        return clip(trigger.strip(), TRIGGER_CHARS)
    return _LABELS[language][kind.value]


def render_state_block(state: RoundState, *, at: datetime, tz: ZoneInfo, language: Language) -> str:
    """Render the owner-state block: availability, device facts, schedule, notes."""
    labels = _LABELS[language]
    lines = [labels["header"]]
    if state.availability is not None:
        lines.append(labels["availability"].format(labels[state.availability.value]))
    if state.device:
        facts = labels["sep"].join(
            f"{clip(str(k), STATE_KEY_CHARS)}={clip(_fact(v), STATE_TEXT_CHARS)}"
            for k, v in list(state.device.items())[:MAX_DEVICE_FACTS]
        )
        lines.append(labels["device"].format(facts))
    upcoming = sorted(
        (item for item in state.schedule if at <= item.at <= at + SCHEDULE_HORIZON),
        key=lambda item: item.at,
    )[:MAX_SCHEDULE_ITEMS]
    if upcoming:
        lines.append(labels["schedule"])
        for item in upcoming:
            when = item.at.astimezone(tz).strftime("%H:%M")
            title = clip(item.title, STATE_TEXT_CHARS)
            lines.append(labels["item"].format(when, _span(item.at - at, language), title))
    if state.notes:
        notes = (clip(note, STATE_TEXT_CHARS) for note in state.notes[:MAX_NOTES])
        lines.append(labels["notes"].format(labels["sep"].join(notes)))
    if state.updated_at is not None:
        lines.append(labels["updated"].format(state.updated_at.astimezone(tz).strftime("%H:%M")))
    return "\n".join(lines)


def clip(text: str, limit: int) -> str:
    """One line of at most `limit` characters: whitespace runs folded, an ellipsis when cut.

    Folding keeps a value from opening lines of its own that would read as
    more of the block.
    """
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fact(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _span(delta: timedelta, language: Language) -> str:
    minutes = max(0, int(delta.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    if language == "zh":
        return f"{hours} 小时 {minutes} 分钟" if hours else f"{minutes} 分钟"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
