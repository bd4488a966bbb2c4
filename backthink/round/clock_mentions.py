"""Times of day the conversation names ("at 8", "10:30", "下午三点半"), and how near they are.

A heartbeat with nothing new is skipped, but "remind me at 8 to call the vet"
said last night is news at 08:00 although no message changed. The digest of
unchanged beats therefore carries how near each such time is, in coarse
steps, so a beat at which a named time comes due asks the model again.

Only clear forms count: `H:MM`, an hour with am/pm, "at/by/around H", and
Chinese `H点` with an optional half or minutes. An hour written without am or
pm may mean either half of the day, and both are tried. Every pattern reads
outside text in one pass: no nested or adjacent unbounded repeats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

DUE: Final = timedelta(minutes=15)
"""A time this close to now, either side, is due."""
LEADS: Final = (timedelta(hours=1), timedelta(hours=3))
"""A time coming within one of these is near, in that step."""
MAX_TIMES: Final = 24  # times read from one request at most
TEXT_CHARS: Final = 4_000  # characters of one text read for times

_CN_DIGITS: Final = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5,
                     "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}  # fmt: skip
_EN_CLOCK = re.compile(r"\b(\d{1,2}):([0-5]\d)(?:\s?([ap])\.?m\b)?", re.IGNORECASE)
_EN_MERIDIEM = re.compile(r"\b(\d{1,2})\s?([ap])\.?m\b", re.IGNORECASE)
_EN_AT = re.compile(r"\b(?:at|by|around|until|till|before)\s(\d{1,2})\b(?!:)", re.IGNORECASE)
_ZH_CLOCK = re.compile(
    r"(早上|上午|中午|下午|傍晚|晚上|凌晨)?(\d{1,2}|[零一二两三四五六七八九十]{1,3})[点點]"
    r"(半|(\d{1,2}|[零一二三四五六七八九十]{1,3})分?)?"
)
_AFTERNOON: Final = frozenset({"下午", "傍晚", "晚上"})
_MORNING: Final = frozenset({"早上", "上午", "凌晨"})


def lead(left: timedelta) -> str:
    """How near a time `left` away is: "due", "within 1 h", "within 3 h", or "later"."""
    if -DUE <= left <= DUE:
        return "due"
    if left < timedelta(0):
        return "past"
    near = next((step for step in LEADS if left <= step), None)
    return "later" if near is None else f"within {near.total_seconds() / 3600:g} h"


def near_times(texts: Iterable[str], *, at: datetime, tz: ZoneInfo) -> list[tuple[str, str]]:
    """The times of day the texts name that are due or near at `at`, with how near each is."""
    local = at.astimezone(tz)
    found: set[tuple[str, str]] = set()
    for hours, minute in _named(texts):
        for hour in hours:
            for day in (local.date(), local.date() + timedelta(days=1)):
                when = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
                step = lead(when - local)
                if step not in ("later", "past"):
                    found.add((f"{hour:02d}:{minute:02d}", step))
    return sorted(found)


def _named(texts: Iterable[str]) -> list[tuple[tuple[int, ...], int]]:
    """Each named time as the hours it may mean and its minute, at most `MAX_TIMES`."""
    times: list[tuple[tuple[int, ...], int]] = []
    for text in texts:
        text = text[:TEXT_CHARS]
        for match in _EN_CLOCK.finditer(text):
            times.append((_hours(int(match[1]), match[3]), int(match[2])))
        for match in _EN_MERIDIEM.finditer(text):
            times.append((_hours(int(match[1]), match[2]), 0))
        for match in _EN_AT.finditer(text):
            times.append((_hours(int(match[1]), None), 0))
        for match in _ZH_CLOCK.finditer(text):
            hour = _number(match[2])
            minute = 30 if match[3] == "半" else _number(match[4]) if match[4] else 0
            if hour is None or minute is None or minute > 59:
                continue
            half = "p" if match[1] in _AFTERNOON else "a" if match[1] in _MORNING else None
            times.append((_hours(hour, half), minute))
        if len(times) >= MAX_TIMES:
            return times[:MAX_TIMES]
    return times


def _hours(hour: int, half: str | None) -> tuple[int, ...]:
    """The hours of the day an hour as written may mean (both halves when it does not say)."""
    if hour > 23:
        return ()
    if half is None:
        return (hour,) if hour == 0 or hour > 12 else (hour % 12, hour % 12 + 12)
    if hour > 12:
        return (hour,)
    return (hour % 12 + 12,) if half.lower() == "p" else (hour % 12,)


def _number(text: str | None) -> int | None:
    """A number written in digits or in Chinese (up to 59), or None."""
    if not text:
        return None
    if text.isdigit():
        return int(text)
    values = [_CN_DIGITS.get(ch) for ch in text]
    if any(v is None for v in values):
        return None
    if "十" not in text:
        return values[0] if len(values) == 1 else None
    tens, _, ones = text.partition("十")
    high = _CN_DIGITS[tens] if tens else 1
    low = _CN_DIGITS[ones] if ones else 0
    return high * 10 + low
