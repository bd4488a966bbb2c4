"""Replies that each scenario of `backthink eval` expects, for the fake endpoint.

`RightReplies` answers a request of `backthink eval` on a scenario file with the
reply its scenario (or day beat) expects: a push at the expected urgency naming
the first expected word, or no push, in the request's output form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from support.fake_script import message_text

# The line of a round's prompt that gives the owner's local time, in each language.
NOW_MARKERS = ("现在是主人当地时间 ", "The owner's local time is now ")
LOCAL_TIME_CHARS = len("2026-03-10 01:30")
RIGHT_THOUGHT = {"zh": "想了想此刻该不该开口。", "en": "I weighed whether to speak up now."}
# A day may expect two pushes naming the same word; the hour keeps them apart for the
# gate's duplicate check.
RIGHT_LINES = {
    "zh": ("{}：{} 这会儿正是时候，记得留意。", "想到你了，{} 这会儿正是时候。"),
    "en": ("About {}: {} is the moment for it.", "Thinking of you: {} is the moment."),
}


@dataclass(frozen=True)
class Expected:
    """What one scenario (or beat of a day) expects, and how to recognise its request."""

    lang: str
    local: str
    texts: tuple[str, ...]
    expect: dict[str, Any]


class RightReplies:
    """Answers each request of `backthink eval` on a scenario file with the reply it expects.

    A request is matched to a scenario by the owner's local time its prompt names,
    then, among the scenarios (and beats) at that time, by how many of their
    messages it shows: a beat shows the messages of the beats before it too.
    """

    def __init__(self, expected: Iterable[Expected]) -> None:
        self._by_time: dict[tuple[str, str], list[Expected]] = {}
        for one in expected:
            self._by_time.setdefault((one.lang, one.local), []).append(one)

    @classmethod
    def from_file(cls, path: Path) -> RightReplies:
        """Read a scenario file: single scenarios and days."""
        return cls(expected_of(path.read_text(encoding="utf-8").splitlines()))

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        shown = " ".join(message_text(m) for m in messages)
        found = _local_time(shown)
        if found is None:
            raise LookupError("the request names no local time")
        lang, local = found
        candidates = self._by_time.get((lang, local), [])
        scored = sorted(
            ((sum(1 for t in c.texts if t in shown), i) for i, c in enumerate(candidates)),
            reverse=True,
        )
        if not scored or (len(scored) > 1 and scored[0][0] == scored[1][0]):
            raise LookupError(f"{len(scored)} scenarios match {lang} {local}")
        chosen = candidates[scored[0][1]]
        json_form = isinstance(body.get("response_format"), dict)
        return right_reply(chosen.lang, chosen.expect, local[-5:], json_form=json_form)


def right_reply(lang: str, expect: dict[str, Any], clock: str, *, json_form: bool) -> str:
    """The reply an expectation calls for at `clock` (HH:MM), with a thought before it."""
    push = bool(expect.get("push"))
    urgency = expect.get("urgency") or "routine"
    mentions = expect.get("mentions") or []
    named, plain = RIGHT_LINES[lang]
    line = named.format(mentions[0], clock) if mentions else plain.format(clock)
    body = line if push else ""
    thought = RIGHT_THOUGHT[lang]
    if json_form:
        decision = "push" if push else "no_push"
        return json.dumps(
            {"thought": thought, "decision": decision, "channel": "auto", "urgency": urgency,
             "body": body},
            ensure_ascii=False,
        )  # fmt: skip
    if lang == "zh":
        tags = f"[我决定:push]\n[紧急:{urgency}]" if push else "[我决定:no_push]"
    else:
        tags = f"[decision:push]\n[urgency:{urgency}]" if push else "[decision:no_push]"
    return f"{thought}\n{tags}\n{body}".rstrip()


def _local_time(shown: str) -> tuple[str, str] | None:
    for lang, marker in zip(("zh", "en"), NOW_MARKERS, strict=True):
        start = shown.rfind(marker)
        if start >= 0:
            begin = start + len(marker)
            return lang, shown[begin : begin + LOCAL_TIME_CHARS]
    return None


def _local(at: str, zone: str | None) -> str:
    when = datetime.fromisoformat(at)
    if zone is not None and when.tzinfo is not None:
        when = when.astimezone(ZoneInfo(zone))
    return when.strftime("%Y-%m-%d %H:%M")


def expected_of(lines: Iterable[str]) -> list[Expected]:
    """Every scenario and every beat of every day in a scenario file, as expected replies."""
    out = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        doc = json.loads(line)
        zone = doc.get("timezone")
        if "day" in doc:
            texts: list[str] = []
            for beat in doc["day"]:
                texts += [m["text"] for m in beat.get("history") or []]
                local = _local(beat["at"], zone)
                out.append(Expected(doc["lang"], local, tuple(texts), beat["expect"]))
        else:
            texts = [m["text"] for m in doc.get("history") or []]
            local = _local(doc["at"], zone)
            out.append(Expected(doc["lang"], local, tuple(texts), doc["expect"]))
    return out
