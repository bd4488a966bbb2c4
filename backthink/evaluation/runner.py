"""`backthink eval`: run scenarios through the real round, in isolation, and score the judgment.

Each run builds a fresh app on in-memory stores (`build_app` with nothing
given): the scenario's history is its whole session, a fake clock stands at
the scenario's time, the state file is the scenario's `state`, and every
channel only records. The configured model endpoint is the one thing it
shares with the owner's setup, with the configured gate, prompts and persona,
so the figures are those of this owner's companion. Nothing reaches the
configured database, channels or MCP servers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from backthink.config import ChannelSettings, Settings, WebChannelSettings
from backthink.config.owners import config_owners, owner_settings
from backthink.decision.failsafe import UNREADABLE
from backthink.decision.reply import read_reply
from backthink.errors import InputError
from backthink.evaluation.figures import RunResult, report
from backthink.evaluation.scenarios import Loaded
from backthink.host.app import build_app, read_persona_prompt
from backthink.models import Message, Outcome, StateProblem, StateReading
from backthink.ports import Channel, ModelClient
from backthink.records import RoundRecord
from backthink.round.state import parse_state
from backthink.store import MemoryMessageStore, MemoryOutbox, MemoryRoundStore
from backthink.testing import FakeClock, RecordingChannel, no_sleep

# The channel a scenario set runs with when the configuration names none.
FALLBACK_CHANNEL = "web"


class ScenarioState:
    """The state provider of one scenario: its `state` object, judged at the round's time.

    A state without `updated_at` counts as written at the scenario's time, the
    way a state file is dated by when it was last written.
    """

    def __init__(self, doc: dict[str, Any] | None, settings: Settings, written: datetime) -> None:
        self._raw = None if doc is None else json.dumps(doc, ensure_ascii=False)
        self._max_age = settings.state.max_age
        self._written = written

    def read(self, at: datetime) -> StateReading:
        """The scenario's state as the round sees it."""
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
    """What `backthink eval` ran: the results of every run and the model it asked."""

    results: list[RunResult]
    scenarios: int
    model: str
    output: str

    def to_json(self, *, invalid: Sequence[str] = ()) -> dict[str, Any]:
        """The `--json` object."""
        return report(
            self.results,
            scenarios=self.scenarios,
            model=self.model,
            output=self.output,
            invalid=list(invalid),
        )


async def run_eval(
    settings: Settings,
    scenarios: Sequence[Loaded],
    *,
    model: ModelClient,
    owner_id: str,
    repeat: int = 1,
) -> Evaluation:
    """Run every scenario `repeat` times, one after another, each on a fresh app.

    Runs go one at a time: a local server answers one request at a time anyway,
    and a scripted endpoint answers in order. The persona prompt is read once
    per language (without a file of its own, the shipped persona speaks the
    scenario's language).
    """
    personas: dict[str, str] = {}
    results: list[RunResult] = []
    for loaded in scenarios:
        lang = loaded.scenario.lang
        if lang not in personas:
            personas[lang] = read_persona_prompt(eval_settings(settings, loaded))
        for run in range(1, repeat + 1):
            record = await run_scenario(
                settings, loaded, model=model, owner_id=owner_id, persona_prompt=personas[lang]
            )
            results.append(result_of(loaded, run, record, settings))
    return Evaluation(results, len(scenarios), model.model_name, settings.model.output)


async def run_scenario(
    settings: Settings,
    loaded: Loaded,
    *,
    model: ModelClient,
    owner_id: str,
    persona_prompt: str,
) -> RoundRecord:
    """One round of one scenario on a fresh, isolated app; returns its record."""
    fitted = eval_settings(settings, loaded)
    messages = MemoryMessageStore()
    rounds = MemoryRoundStore()
    for item in loaded.scenario.history:
        await messages.add(
            Message(
                owner_id=owner_id,
                role=item.role,
                text=item.text,
                speaker=item.speaker,
                channel=item.channel,
                origin=item.origin,
                created_at=loaded.history_at(item),
            )
        )
    senders: dict[str, Channel] = {
        name: RecordingChannel(name)
        for name, channel in fitted.channels.items()
        if not isinstance(channel, WebChannelSettings)
    }
    app = build_app(
        fitted,
        messages=messages,
        rounds=rounds,
        outbox=MemoryOutbox(messages, rounds),
        model=model,
        clock=FakeClock(loaded.at.astimezone(UTC)),
        state=ScenarioState(loaded.scenario.state, fitted, loaded.at),
        channels=senders,
        persona_prompt=persona_prompt,
        sleep=no_sleep,
    )
    return await app.thinker.run_round(owner_id, loaded.scenario.trigger)


def result_of(loaded: Loaded, run: int, record: RoundRecord, settings: Settings) -> RunResult:
    """Score one run: what the gate delivered against what the scenario expects."""
    expect = loaded.scenario.expect
    problems: list[str] = []
    parsed: bool | None = None
    if record.raw_reply is not None:
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
        replied=record.raw_reply is not None,
        parsed=parsed,
        problems=problems,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        latency_ms=record.latency_ms,
    )
