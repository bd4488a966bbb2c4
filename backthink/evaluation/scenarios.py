"""Evaluation scenarios: one JSON object per line, validated where it enters.

A scenario is a moment in an owner's life written down as data: the recent
conversation, the state file at that moment, the local time of the round, and
what a good companion would do (`expect`). A day is a run of such moments in
one session (`day`: its beats, and `max_pushes`, the most pushes the day
should deliver). A line that is not a valid scenario is reported as
`FILE:LINE: key: problem` and left out; every other line still runs, so one
typo never costs the whole evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backthink.models import FUTURE_SKEW, RoundState, Urgency, known_zone

MAX_HISTORY = 200  # messages; a scenario is a moment, not an archive
MAX_BEATS = 48  # rounds in one day: one every half hour, around the clock
MAX_TAGS = 12
Tag = Annotated[str, Field(min_length=1, max_length=40)]


class _Strict(BaseModel):
    # Unknown keys are refused: a misspelt "expect" must not silently become no label.
    model_config = ConfigDict(extra="forbid", frozen=True)


class HistoryItem(_Strict):
    """One main-session message before the round."""

    role: Literal["user", "assistant", "system"]
    text: str
    at: datetime
    channel: str | None = None
    speaker: str | None = None
    # "proactive" marks an earlier push of the companion's, which the gate counts.
    origin: Literal["chat", "proactive"] = "chat"


class Expect(_Strict):
    """What a good companion does in this moment."""

    push: bool
    urgency: Urgency | None = None
    """The least urgency a right push carries (a smoke alarm is critical)."""
    mentions: list[str] = Field(default_factory=list)
    """Words of which a right push's body mentions at least one (case-insensitive)."""

    @model_validator(mode="after")
    def _only_for_a_push(self) -> Expect:
        if not self.push and (self.urgency is not None or self.mentions):
            raise ValueError("urgency and mentions belong to an expected push")
        return self


class Scenario(_Strict):
    """One evaluation scenario as written in the file."""

    id: str = Field(min_length=1, max_length=120)
    lang: Literal["zh", "en"]
    history: list[HistoryItem] = Field(default_factory=list, max_length=MAX_HISTORY)
    state: dict[str, Any] | None = None
    at: datetime
    timezone: str | None = None
    """The owner's IANA time zone; by default the configured one, or the offset of `at`."""
    trigger: str = Field(default="heartbeat", min_length=1)
    expect: Expect
    why: str = ""
    """Why the label is what it is, in a sentence."""
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    """The kinds of moment this is (`stale_followup`, `late_night`, ...): figures per tag."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        return None if value is None else known_zone(value)

    @field_validator("state")
    @classmethod
    def _a_state_document(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _state_document(value)


def _state_document(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        RoundState.model_validate(value)
    return value


class Beat(_Strict):
    """One round of a day: its time, the state file then, the messages new since the last beat."""

    at: datetime
    state: dict[str, Any] | None = None
    history: list[HistoryItem] = Field(default_factory=list, max_length=MAX_HISTORY)
    trigger: str = Field(default="heartbeat", min_length=1)
    expect: Expect

    @field_validator("state")
    @classmethod
    def _a_state_document(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _state_document(value)


class Day(_Strict):
    """A day of one owner: beats run in order in one session, the gate's history kept."""

    id: str = Field(min_length=1, max_length=120)
    lang: Literal["zh", "en"]
    timezone: str | None = None
    day: list[Beat] = Field(min_length=1, max_length=MAX_BEATS)
    max_pushes: int = Field(ge=0)
    """The most pushes the day should deliver; more is over budget."""
    why: str = ""
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        return None if value is None else known_zone(value)

    @model_validator(mode="after")
    def _beats_in_order(self) -> Day:
        for index in range(1, len(self.day)):
            if _naive_or_utc(self.day[index].at) <= _naive_or_utc(self.day[index - 1].at):
                raise ValueError(f"day.{index}.at: not later than the beat before it")
        return self

    def beat(self, index: int) -> Scenario:
        """Beat `index` (from 0) as a scenario: the day's id with `@n`, its own messages."""
        beat = self.day[index]
        return Scenario(
            id=f"{self.id}@{index + 1}",
            lang=self.lang,
            history=beat.history,
            state=beat.state,
            at=beat.at,
            timezone=self.timezone,
            trigger=beat.trigger,
            expect=beat.expect,
            why=self.why,
            tags=self.tags,
        )


def _naive_or_utc(at: datetime) -> datetime:
    # Beats of one day are compared as written: all with offsets, or all local.
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at


@dataclass(frozen=True)
class Loaded:
    """A scenario ready to run: its owner time zone resolved and every time aware."""

    scenario: Scenario
    tz: ZoneInfo
    at: datetime
    line: int

    @property
    def id(self) -> str:
        return self.scenario.id

    def history_at(self, item: HistoryItem) -> datetime:
        """A message's time; one written without an offset is the owner's local time."""
        return item.at if item.at.tzinfo is not None else item.at.replace(tzinfo=self.tz)


@dataclass(frozen=True)
class LoadedDay:
    """A day ready to run: each beat a loaded scenario, in the owner's zone, in order."""

    day: Day
    beats: list[Loaded]
    line: int

    @property
    def id(self) -> str:
        return self.day.id


@dataclass
class ScenarioFile:
    """The scenarios and days of one file and the lines that were left out, with why."""

    scenarios: list[Loaded] = field(default_factory=list)
    days: list[LoadedDay] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_scenarios(lines: Iterable[str], *, source: str, owner_tz: ZoneInfo) -> ScenarioFile:
    """Validate every line; blank lines and lines starting with `#` are skipped.

    Returns:
        The valid scenarios in file order and one `source:line: problem` per bad line.
    """
    out = ScenarioFile()
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            loaded = _load_line(line, owner_tz=owner_tz, line=number)
        except _LineError as exc:
            out.problems.append(f"{where}: {exc}")
            continue
        if loaded.id in seen:
            out.problems.append(
                f"{where}: id: {loaded.id!r} is already used on line {seen[loaded.id]}"
            )
            continue
        seen[loaded.id] = number
        if isinstance(loaded, LoadedDay):
            out.days.append(loaded)
        else:
            out.scenarios.append(loaded)
    return out


_M = TypeVar("_M", bound=BaseModel)


class _LineError(ValueError):
    """One line is not a valid scenario; the message says which key and why."""


def _load_line(text: str, *, owner_tz: ZoneInfo, line: int) -> Loaded | LoadedDay:
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise _LineError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _LineError("expected a JSON object")
    if "day" in data:
        day = _validated(Day, data)
        tz = _owner_zone(day.timezone, day.day[0].at, owner_tz)
        beats = [
            _placed(day.beat(index), tz, line, prefix=f"day.{index}.")
            for index in range(len(day.day))
        ]
        return LoadedDay(day, beats, line)
    scenario = _validated(Scenario, data)
    return _placed(scenario, _owner_zone(scenario.timezone, scenario.at, owner_tz), line)


def _validated(model: type[_M], data: dict[str, Any]) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        raise _LineError(f"{key}: {msg}" if key else msg) from None


def _placed(scenario: Scenario, tz: ZoneInfo, line: int, *, prefix: str = "") -> Loaded:
    """A scenario in its owner's zone, every message dated no later than its round."""
    at = scenario.at if scenario.at.tzinfo is not None else scenario.at.replace(tzinfo=tz)
    loaded = Loaded(scenario, tz, at, line)
    for index, item in enumerate(scenario.history):
        if loaded.history_at(item) > at + FUTURE_SKEW:
            raise _LineError(f"{prefix}history.{index}.at: later than the round's at")
    return loaded


def _owner_zone(timezone: str | None, first: datetime, owner_tz: ZoneInfo) -> ZoneInfo:
    """The owner's zone for a scenario: named, else the configured one if `at` agrees.

    A scenario written for 23:30 in Shanghai must still be 23:30 for an owner
    configured in New York: otherwise late night would silently become noon.
    Then a whole-hour offset stands in as a fixed zone (Etc/GMT-8 is UTC+8).

    A day is placed by its first beat.

    Raises:
        _LineError: `at` carries an offset that is no whole hour and no zone is named.
    """
    if timezone is not None:
        return ZoneInfo(timezone)
    offset = first.utcoffset()
    if offset is None or first.astimezone(owner_tz).utcoffset() == offset:
        return owner_tz
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    if rest:
        raise _LineError(
            f"at: the offset {_offset(offset)} is not owner.timezone's; name a timezone"
        )
    # The Etc zones count the other way round: Etc/GMT-8 is eight hours east.
    return ZoneInfo("UTC" if hours == 0 else f"Etc/GMT{-hours:+d}")


def _offset(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}"
