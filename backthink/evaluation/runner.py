"""`backthink eval`: run scenarios through the real round, in isolation, and score the judgment.

Each run builds a fresh app on in-memory stores (`VolatileStores`): the
scenario's history is its whole session, a manual clock stands at the
scenario's time, the state file is the scenario's `state`, and every channel
only takes what it is given. The configured model endpoint is the one thing
it shares with the owner's setup, with the configured gate, prompts and
persona, so the figures are those of this owner's companion. Nothing reaches
the configured database, channels or MCP servers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from backthink.clock import ManualClock
from backthink.config import ChannelSettings, Settings, WebChannelSettings
from backthink.config.owners import config_owners, owner_settings
from backthink.decision.failsafe import UNREADABLE
from backthink.decision.reply import read_reply
from backthink.errors import InputError
from backthink.evaluation.baselines import NAMES, CannedModel, baseline_reply
from backthink.evaluation.figures import DayRun, RunResult
from backthink.evaluation.report import report
from backthink.evaluation.scenarios import Loaded, LoadedDay
from backthink.host.app import AppOverrides, build_app, read_persona_prompt
from backthink.models import Message, Outcome, StateProblem, StateReading
from backthink.ports import Channel, ModelClient
from backthink.records import OutgoingMessage, RoundRecord
from backthink.round.state import parse_state
from backthink.store import VolatileStores

# The channel a scenario set runs with when the configuration names none.
FALLBACK_CHANNEL = "web"


class ScenarioState:
    """The state provider of a run: the current scenario's (or beat's) `state`, judged at its time.

    A state without `updated_at` counts as written at the scenario's time, the
    way a state file is dated by when it was last written. A day shows each
    beat's state in turn.
    """

    def __init__(self, settings: Settings) -> None:
        self._raw: str | None = None
        self._max_age = settings.state.max_age
        self._written: datetime | None = None

    def show(self, doc: dict[str, Any] | None, written: datetime) -> None:
        """From now on, the state file holds `doc` (None: there is no state file)."""
        self._raw = None if doc is None else json.dumps(doc, ensure_ascii=False)
        self._written = written

    def read(self, at: datetime) -> StateReading:
        """The current state as the round sees it."""
        if self._raw is None:
            return StateReading(problem=StateProblem.NOT_CONFIGURED)
        return parse_state(self._raw, at=at, max_age=self._max_age, fallback_time=self._written)


def config_owner_settings(settings: Settings, wanted: str | None) -> Settings:
    """The settings of the owner to evaluate for: one the config file names.

    An owner added with `backthink owners add` lives in the database, which an
    evaluation never opens; name the owner in the config file to evaluate it.

    Raises:
        InputError: the owner is not in the config file, or several are and none is named.
    """
    named = {owner.id: owner for owner in config_owners(settings)}
    if wanted is None:
        if settings.owner.id in named:
            wanted = settings.owner.id
        elif len(named) == 1:
            wanted = next(iter(named))
        else:
            raise InputError(f"several owners: pass --owner (one of {', '.join(sorted(named))})")
    if wanted not in named:
        raise InputError(
            f"eval runs for an owner of the config file, and {wanted!r} is not one "
            "(eval never opens the database)"
        )
    return owner_settings(settings, named[wanted])


def eval_settings(settings: Settings, loaded: Loaded) -> Settings:
    """The owner's settings, fitted to one scenario: its language, its zone, no MCP servers.

    MCP tools reach outside programs (a calendar, a mailbox), so an evaluation
    never starts them; the built-in tools work on the run's in-memory stores.
    """
    channels: dict[str, ChannelSettings] = dict(settings.channels) or {
        FALLBACK_CHANNEL: WebChannelSettings()
    }
    return settings.model_copy(
        update={
            "owner": settings.owner.model_copy(update={"timezone": loaded.tz.key}),
            "prompt": settings.prompt.model_copy(update={"language": loaded.scenario.lang}),
            "tools": settings.tools.model_copy(update={"mcp": {}}),
            "channels": channels,
        }
    )


@dataclass(frozen=True)
class Evaluation:
    """What `backthink eval` ran: every run of the model and of the baselines, and the model."""

    results: list[RunResult]
    scenarios: int
    model: str
    output: str
    days: list[DayRun] = field(default_factory=list)
    baselines: dict[str, list[RunResult]] = field(default_factory=dict)
    day_baselines: dict[str, list[DayRun]] = field(default_factory=dict)

    def to_json(self, *, invalid: Sequence[str] = ()) -> dict[str, Any]:
        """The `--json` object."""
        return report(
            self.results,
            scenarios=self.scenarios,
            model=self.model,
            output=self.output,
            invalid=list(invalid),
            baselines=self.baselines,
            days=self.days,
            day_baselines=self.day_baselines,
        )


async def run_eval(
    settings: Settings,
    scenarios: Sequence[Loaded],
    *,
    model: ModelClient,
    owner_id: str,
    repeat: int = 1,
    days: Sequence[LoadedDay] = (),
    baselines: bool = True,
) -> Evaluation:
    """Run every scenario and day `repeat` times, one after another, each on a fresh app.

    Runs go one at a time: a local server answers one request at a time anyway,
    and a scripted endpoint answers in order. The baselines ask no model and
    always answer alike, so they run once per scenario and day. The persona
    prompt is read once per language (without a file of its own, the shipped
    persona speaks the scenario's language).
    """
    personas = Personas(settings)
    results: list[RunResult] = []
    for loaded in scenarios:
        for run in range(1, repeat + 1):
            record = await run_scenario(
                settings, loaded, model=model, owner_id=owner_id, persona_prompt=personas[loaded]
            )
            results.append(result_of(loaded, run, record, settings))
    day_runs = [
        await run_day(settings, day, run, model=model, owner_id=owner_id, personas=personas)
        for day in days
        for run in range(1, repeat + 1)
    ]
    evaluation = Evaluation(
        results, len(scenarios), model.model_name, settings.model.output, days=day_runs
    )
    if not baselines:
        return evaluation
    output = settings.model.output
    for name in NAMES:
        canned = CannedModel(name)

        def answer(loaded: Loaded, canned: CannedModel = canned, name: str = name) -> None:
            canned.answer = baseline_reply(name, loaded.scenario, output)

        evaluation.baselines[name] = []
        for loaded in scenarios:
            answer(loaded)
            record = await run_scenario(
                settings, loaded, model=canned, owner_id=owner_id, persona_prompt=personas[loaded]
            )
            evaluation.baselines[name].append(result_of(loaded, 1, record, settings))
        evaluation.day_baselines[name] = [
            await run_day(
                settings,
                day,
                1,
                model=canned,
                owner_id=owner_id,
                personas=personas,
                before=answer,
            )
            for day in days
        ]
    return evaluation


class Personas:
    """The persona prompt per language, read once."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._read: dict[str, str] = {}

    def __getitem__(self, loaded: Loaded) -> str:
        lang = loaded.scenario.lang
        if lang not in self._read:
            self._read[lang] = read_persona_prompt(eval_settings(self._settings, loaded))
        return self._read[lang]


class ScenarioChannel:
    """A channel of a run: always connected, it takes every message and sends it nowhere.

    Where a push went is on the round's record; nothing leaves the process.
    """

    def __init__(self, name: str) -> None:
        """A channel called `name`."""
        self.name = name

    @property
    def connected(self) -> bool:
        """The gate may always choose it."""
        return True

    async def send(self, message: OutgoingMessage) -> None:
        """Take the message."""


async def _no_wait(seconds: float) -> None:
    """The dispatcher's wait between tries: a run's channels never fail, so none is needed."""


class Session:
    """One owner's isolated world: in-memory stores, a manual clock, channels that only take.

    A scenario gets a session of its own; a day keeps one session for all its
    beats, so what the gate delivered at one beat is in the history of the next.
    """

    def __init__(
        self,
        settings: Settings,
        first: Loaded,
        *,
        model: ModelClient,
        owner_id: str,
        persona_prompt: str,
    ) -> None:
        self.fitted = eval_settings(settings, first)
        self.owner_id = owner_id
        stores = VolatileStores.empty()
        self.messages = stores.messages
        self.clock = ManualClock(first.at.astimezone(UTC))
        self.state = ScenarioState(self.fitted)
        senders: dict[str, Channel] = {
            name: ScenarioChannel(name)
            for name, channel in self.fitted.channels.items()
            if not isinstance(channel, WebChannelSettings)
        }
        self.app = build_app(
            self.fitted,
            stores,
            AppOverrides(
                model=model,
                clock=self.clock,
                state=self.state,
                channels=senders,
                persona_prompt=persona_prompt,
                sleep=_no_wait,
            ),
        )

    async def play(self, loaded: Loaded) -> RoundRecord:
        """Add the scenario's messages, stand the clock and the state at its time, run a round."""
        for item in loaded.scenario.history:
            await self.messages.add(
                Message(
                    owner_id=self.owner_id,
                    role=item.role,
                    text=item.text,
                    speaker=item.speaker,
                    channel=item.channel,
                    origin=item.origin,
                    created_at=loaded.history_at(item),
                )
            )
        self.clock.set(loaded.at.astimezone(UTC))
        self.state.show(loaded.scenario.state, loaded.at)
        return await self.app.thinker.run_round(self.owner_id, loaded.scenario.trigger)


async def run_scenario(
    settings: Settings,
    loaded: Loaded,
    *,
    model: ModelClient,
    owner_id: str,
    persona_prompt: str,
) -> RoundRecord:
    """One round of one scenario on a fresh, isolated app; returns its record."""
    session = Session(
        settings, loaded, model=model, owner_id=owner_id, persona_prompt=persona_prompt
    )
    return await session.play(loaded)


async def run_day(
    settings: Settings,
    day: LoadedDay,
    run: int,
    *,
    model: ModelClient,
    owner_id: str,
    personas: Personas,
    before: Callable[[Loaded], None] | None = None,
) -> DayRun:
    """One run of a day: its beats in order on one app; `before` is called ahead of each beat."""
    first = day.beats[0]
    session = Session(
        settings, first, model=model, owner_id=owner_id, persona_prompt=personas[first]
    )
    beats = []
    for beat in day.beats:
        if before is not None:
            before(beat)
        record = await session.play(beat)
        beats.append(result_of(beat, run, record, settings))
    return DayRun(day.id, day.day.lang, run, day.day.max_pushes, beats, tuple(day.day.tags))


def result_of(loaded: Loaded, run: int, record: RoundRecord, settings: Settings) -> RunResult:
    """Score one run: the model's decision and what the gate delivered, against the expectation."""
    expect = loaded.scenario.expect
    problems: list[str] = []
    parsed: bool | None = None
    decision = None
    if record.raw_reply is not None:
        # The model's own decision, read once as the round read it, before any gate.
        decision = read_reply(
            record.raw_reply,
            output=settings.model.output,
            max_body_chars=settings.gate.max_body_chars,
        ).decision
        problems = decision.problems
        parsed = not set(problems) & UNREADABLE
    return RunResult(
        id=loaded.id,
        lang=loaded.scenario.lang,
        run=run,
        expected_push=expect.push,
        expected_urgency=expect.urgency,
        mentions=tuple(expect.mentions),
        push=record.outcome is Outcome.DELIVERED,
        outcome=record.outcome.value,
        reason=record.reason,
        urgency=record.urgency,
        body=record.body,
        model_push=decision.push if decision is not None else None,
        model_urgency=decision.urgency if decision is not None else None,
        model_body=decision.body if decision is not None and decision.body else None,
        replied=record.raw_reply is not None,
        parsed=parsed,
        problems=problems,
        tags=tuple(loaded.scenario.tags),
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        latency_ms=record.latency_ms,
    )
