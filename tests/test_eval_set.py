"""The shipped evaluation set keeps its own rules: files, ids, zones, tags, families, days."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from backthink.evaluation.scenarios import load_scenarios

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "eval"
FILES = ("scenarios.jsonl", "holdout.jsonl", "days.jsonl")
SH = ZoneInfo("Asia/Shanghai")
EN_ZONES = {"Europe/London", "America/New_York", "America/Chicago", "America/Los_Angeles"}
QUIET = (time(23, 0), time(7, 0))  # the default gate's quiet hours, local time
# The new families and what they expect; every one has at least this many scenarios.
SILENT_FAMILIES = ("stale_followup", "cancelled", "repeat_nag", "farewell")
PUSH_FAMILIES = ("changed_plan", "critical_state")
FAMILY_MINIMUM = 12
KINDS = {
    "late_night", "busy", "dnd", "birthday", "exam", "idle", "echo", "leave_alone",
    "owner_active", "reminder", "upcoming", "followup", "care", "startup", "poke",
    "injection", "rate_limit", "weather", "device", "quiet_hours", "day",
}  # fmt: skip
TAGS = KINDS | set(SILENT_FAMILIES) | set(PUSH_FAMILIES)
NEAR_COPY = 0.45  # Jaccard of 4-character shingles of two scenarios' owner messages
CJK = re.compile(r"[\u4e00-\u9fff]")


def docs(name: str) -> list[dict[str, Any]]:
    lines = (EVAL / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip() and not line.startswith("#")]


def singles() -> list[dict[str, Any]]:
    return docs("scenarios.jsonl") + docs("holdout.jsonl")


def zone_of(doc: dict[str, Any]) -> ZoneInfo:
    return ZoneInfo(doc.get("timezone") or "Asia/Shanghai")


def quiet(at: datetime, zone: ZoneInfo) -> bool:
    local = at.astimezone(zone).time()
    return local >= QUIET[0] or local < QUIET[1]


@pytest.mark.parametrize("name", FILES)
def test_every_line_loads(name: str) -> None:
    """Each file loads whole with the evaluation's own loader; days only in days.jsonl."""
    text = (EVAL / name).read_text(encoding="utf-8")
    loaded = load_scenarios(text.splitlines(), source=name, owner_tz=ZoneInfo("UTC"))
    assert loaded.problems == []
    if name == "days.jsonl":
        assert loaded.scenarios == [] and len(loaded.days) >= 10
    else:
        assert loaded.days == []


def test_ids_are_unique_across_the_files_and_the_holdout_is_marked() -> None:
    """No id twice in the whole set; holdout ids carry `-h-`, no other id does."""
    ids = [d["id"] for name in FILES for d in docs(name)]
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert all("-h-" in d["id"] for d in docs("holdout.jsonl"))
    assert not any("-h-" in d["id"] for d in docs("scenarios.jsonl") + docs("days.jsonl"))
    assert all(d["id"].startswith(f"{d['lang']}-") for name in FILES for d in docs(name))


def times_of(doc: dict[str, Any]) -> list[str]:
    state = doc.get("state") or {}
    found = [doc["at"], *(m["at"] for m in doc.get("history", []))]
    found += [item["at"] for item in state.get("schedule", [])]
    return found + ([state["updated_at"]] if state.get("updated_at") else [])


def test_every_time_carries_its_zones_offset() -> None:
    """zh in Asia/Shanghai; en names one of four zones; each time has that zone's offset."""
    units = [*singles(), *({**beat, "lang": d["lang"], "timezone": d.get("timezone")}
                           for d in docs("days.jsonl") for beat in d["day"])]  # fmt: skip
    for doc in units:
        if doc["lang"] == "zh":
            assert doc.get("timezone") in (None, "Asia/Shanghai"), doc["at"]
        else:
            assert doc.get("timezone") in EN_ZONES, doc["at"]
        zone = zone_of(doc)
        for text in times_of(doc):
            when = datetime.fromisoformat(text)
            assert when.utcoffset() == when.astimezone(zone).utcoffset(), (doc["at"], text)


def test_histories_are_in_time_order() -> None:
    """Messages oldest first; a day's messages come after the beat before them."""
    for doc in singles():
        times = [datetime.fromisoformat(m["at"]) for m in doc["history"]]
        assert times == sorted(times), doc["id"]
    for day in docs("days.jsonl"):
        last = None
        for beat in day["day"]:
            times = [datetime.fromisoformat(m["at"]) for m in beat.get("history", [])]
            assert times == sorted(times), day["id"]
            assert last is None or all(t > last for t in times), day["id"]
            last = datetime.fromisoformat(beat["at"])


def test_tags_why_and_mentions() -> None:
    """Known tags, the quiet-hours tag exactly at night, a reason, mentions in the language."""
    for doc in singles():
        tags = doc["tags"]
        assert tags and set(tags) <= TAGS, doc["id"]
        at = datetime.fromisoformat(doc["at"])
        assert ("quiet_hours" in tags) == quiet(at, zone_of(doc)), doc["id"]
        assert len(doc["why"]) >= 10, doc["id"]
        mentions = doc["expect"].get("mentions", [])
        if doc["lang"] == "en":
            assert not any(CJK.search(m) for m in mentions), doc["id"]
        elif mentions:
            assert any(CJK.search(m) for m in mentions), doc["id"]
    for day in docs("days.jsonl"):
        assert day["tags"] == ["day"] and len(day["why"]) >= 10


def test_the_families_expect_what_they_name() -> None:
    """Each new family has 12 or more scenarios in both languages, each labelled as its kind."""
    shipped = docs("scenarios.jsonl")
    for family in (*SILENT_FAMILIES, *PUSH_FAMILIES):
        members = [d for d in shipped if family in d["tags"]]
        assert len(members) >= FAMILY_MINIMUM, family
        langs = Counter(d["lang"] for d in members)
        assert min(langs["zh"], langs["en"]) >= FAMILY_MINIMUM // 2 - 1, family
    for doc in singles():
        family, expect = doc["tags"][0], doc["expect"]
        if family in SILENT_FAMILIES:
            assert expect["push"] is False, doc["id"]
        if family == "changed_plan":
            assert expect["push"] and expect["mentions"], doc["id"]
        if family == "critical_state":
            assert expect["push"] and expect["urgency"] == "critical", doc["id"]


def test_the_days() -> None:
    """At least 10 days of 10 or more beats, a night beat each, a budget that fits the day."""
    days = docs("days.jsonl")
    assert len(days) >= 10
    assert Counter(d["lang"] for d in days) == {"zh": len(days) // 2, "en": len(days) // 2}
    for day in days:
        beats = day["day"]
        zone = zone_of(day)
        assert len(beats) >= 10, day["id"]
        assert any(quiet(datetime.fromisoformat(b["at"]), zone) for b in beats), day["id"]
        expected = sum(1 for b in beats if b["expect"]["push"])
        assert 1 <= expected <= day["max_pushes"], day["id"]
        # A beat without a state has no state file: a day gives every beat one, or none.
        assert len({"state" in b for b in beats}) == 1, day["id"]


def shingles(text: str, size: int = 4) -> set[str]:
    folded = " ".join(text.lower().split())
    return {folded[i : i + size] for i in range(max(0, len(folded) - size + 1))}


def test_no_two_scenarios_tell_the_same_story() -> None:
    """The owner's words of two new scenarios never overlap as much as a copy would."""
    # The first 64 scenarios (version 1) pair each story in both languages' styles on
    # purpose; from version 2 on, every story is told once.
    shipped = docs("scenarios.jsonl")
    old = {d["id"] for d in shipped[:64]}
    texts = [
        (d["id"], shingles(" ".join(m["text"] for m in d["history"] if m["role"] == "user")))
        for d in singles()
    ]
    texts = [(sid, s) for sid, s in texts if len(s) >= 20]
    for i, (a, sa) in enumerate(texts):
        for b, sb in texts[i + 1 :]:
            if a in old and b in old:
                continue
            assert len(sa & sb) / len(sa | sb) < NEAR_COPY, (a, b)


def test_the_set_states_its_version() -> None:
    """eval/README.md names the set's version, and the counts it gives are the files'."""
    readme = (EVAL / "README.md").read_text(encoding="utf-8")
    assert "Set version: **2**." in readme
    for name in FILES:
        assert f"| `{name}` |" in readme
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.rstrip(" |").endswith(str(len(docs(name))))
