"""The composition root: settings, one set of stores and optional overrides -> the object graph.

`build_app` wires every part from already-open resources and is the one place
that knows how the parts fit; the daemon, the command line, the checks, the
test rigs and the benchmarks all get their `App` from it. `open_app` opens the
resources a real process needs (the database, the model client) on one
`AsyncExitStack` and closes them in reverse order.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from backthink.clock import SystemClock
from backthink.config import Settings, WebChannelSettings
from backthink.config.shipped import default_persona, prompt_templates
from backthink.delivery.audience import Audience
from backthink.delivery.channels import build_channels
from backthink.delivery.dispatcher import Dispatcher, Sleep
from backthink.errors import ConfigError, ModelNotConfiguredError
from backthink.host.turns import LiveTurns
from backthink.ports import (
    Channel,
    Clock,
    Marks,
    MemoryStore,
    MessageStore,
    ModelClient,
    Outbox,
    RoundStore,
    StateProvider,
    Turns,
)
from backthink.round.pause import Pauses
from backthink.round.prompts import PromptBook, owner_display_name
from backthink.round.recorder import Recorder
from backthink.round.request import RequestBuilder
from backthink.round.spill import Spill
from backthink.round.state import FileStateProvider
from backthink.round.thinker import Thinker
from backthink.store import Stores
from backthink.tools import Tool
from backthink.tools.offer import ToolOffer

if TYPE_CHECKING:
    from backthink.endpoint.client import OpenAIModelClient


MODEL_MISSING_HINT = (
    "no model endpoint configured: set model.base_url in the config file "
    "or BACKTHINK_MODEL__BASE_URL (and model.api_key or OPENAI_API_KEY)"
)


class FromSettings:
    """Stands for an override left out: the part is built from the settings."""


FROM_SETTINGS: Final = FromSettings()


def read_persona_prompt(settings: Settings) -> str:
    """Read the persona system prompt; no file configured means the shipped default persona.

    Raises:
        ConfigError: the configured file cannot be read.
    """
    path = settings.persona.prompt_file
    if path is None:
        language = settings.prompt.language
        return default_persona(
            language,
            persona_name=settings.persona.name or settings.persona.id,
            owner_name=owner_display_name(settings.owner.name, language),
        )
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"persona.prompt_file: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"persona.prompt_file: {path} is not UTF-8 text") from None


def settle_heap() -> None:
    """Take everything allocated so far out of the cyclic garbage collector's sight.

    By the time a long-running process has wired its app, its modules and
    clients (the model SDK alone brings thousands of classes) live as long as
    it does. Once frozen, a collection triggered during a round scans only
    the objects created since, instead of the whole heap: a round's median
    and p99 overhead drop by milliseconds. Nothing is collected first, so
    calling this costs no time at start.
    """
    gc.freeze()


@dataclass
class App:
    """Everything one process needs to run rounds."""

    settings: Settings
    clock: Clock
    messages: MessageStore
    rounds: RoundStore
    outbox: Outbox
    model: ModelClient | None
    dispatcher: Dispatcher
    recorder: Recorder
    thinker: Thinker
    memories: MemoryStore
    pauses: Pauses
    marks: Marks


def session_channel(settings: Settings, senders: Mapping[str, Channel]) -> str | None:
    """The main session's own channel: the first configured channel of type web.

    A channel given as a sender override is a sender, whatever its settings say.
    """
    return next(
        (
            name
            for name, channel in settings.channels.items()
            if isinstance(channel, WebChannelSettings) and name not in senders
        ),
        None,
    )


@dataclass(frozen=True)
class AppOverrides:
    """Parts given to `build_app` instead of those it builds from the settings.

    Attributes:
        model: the model client; None means no endpoint is configured (rounds
            then fail with a clear note); left out, the settings' endpoint.
        clock: the source of "now" (left out: the system clock).
        state: where the owner's state comes from (left out: the state file).
        channels: the senders instead of those the settings configure; a
            configured channel of type web that is not among them stays the
            main session's own channel.
        prompts_dir: the prompt templates' folder instead of the settings'.
        prompts: the templates, already read (a fleet reads them once).
        persona_prompt: the persona prompt, already read.
        sleep: how the dispatcher waits between tries.
        spill: keeps round records the database refuses.
        tools: offered beside the built-in and MCP tools (an embedding program's own).
        audience: the API's clients, when it is on: it decides whether the
            session channel is connected, and hears of every push.
        turns: the registry of live turns the process shares between its apps
            (left out: this app's own).
    """

    model: ModelClient | FromSettings | None = FROM_SETTINGS
    clock: Clock | None = None
    state: StateProvider | None = None
    channels: Mapping[str, Channel] | None = None
    prompts_dir: Path | None = None
    prompts: PromptBook | None = None
    persona_prompt: str | None = None
    sleep: Sleep | None = None
    spill: Spill | None = None
    tools: Sequence[Tool] = ()
    audience: Audience | None = None
    turns: Turns | None = None


NO_OVERRIDES: Final = AppOverrides()


def build_app(settings: Settings, stores: Stores, overrides: AppOverrides = NO_OVERRIDES) -> App:
    """Wire the object graph over one set of stores; what `overrides` leaves out, from `settings`.

    `stores` are an open database's (`SqlStores`) or in-memory ones that
    share one state (`VolatileStores`: tests, benchmarks, the evaluation).

    Raises:
        ConfigError: templates, persona prompt or a channel's settings cannot work.
    """
    o = overrides
    clock = o.clock or SystemClock()
    model = o.model
    if isinstance(model, FromSettings):
        model = model_from_settings(settings, marks=stores.marks, clock=clock)
    senders = dict(o.channels) if o.channels is not None else build_channels(settings.channels)
    order = [*settings.channels, *(name for name in senders if name not in settings.channels)]
    dispatcher = Dispatcher(
        stores.outbox,
        senders,
        clock,
        persona=settings.persona,
        order=order,
        session_channel=session_channel(settings, o.channels or {}),
        cooldown=settings.gate.channel_cooldown,
        sleep=o.sleep,
        audience=o.audience.of(settings.owner.id) if o.audience is not None else None,
        marks=stores.marks,
        owner_id=settings.owner.id,
    )
    requests = RequestBuilder(
        settings,
        prompts=o.prompts
        or PromptBook.load(
            o.prompts_dir or settings.prompt.dir or prompt_templates(), settings.prompt.language
        ),
        persona_prompt=read_persona_prompt(settings)
        if o.persona_prompt is None
        else o.persona_prompt,
        state=o.state
        or FileStateProvider(
            settings.state.file, settings.state.max_age, max_bytes=settings.state.max_bytes
        ),
    )
    recorder = Recorder(stores.rounds, spill=o.spill)
    # MCP servers' stderr is kept beside the database, where the spill file lives.
    data = settings.database.spill_path
    mcp_logs = data.parent if data is not None else None
    pauses = Pauses(stores.marks)
    thinker = Thinker(
        settings,
        messages=stores.messages,
        requests=requests,
        model=model,
        delivery=dispatcher,
        recorder=recorder,
        clock=clock,
        memories=stores.memories,
        pauses=pauses,
        rounds=stores.rounds,
        turns=overrides.turns if overrides.turns is not None else LiveTurns(),
        offer=ToolOffer(
            settings,
            clock=clock,
            connected=dispatcher.connected,
            rounds=stores.rounds,
            memories=stores.memories if settings.memory.enabled else None,
            marks=stores.marks,
            extra=o.tools,
            errlog_dir=mcp_logs,
        ),
        model_missing_hint=MODEL_MISSING_HINT,
    )
    return App(
        settings,
        clock,
        stores.messages,
        stores.rounds,
        stores.outbox,
        model,
        dispatcher,
        recorder,
        thinker,
        stores.memories,
        pauses,
        stores.marks,
    )


def model_from_settings(
    settings: Settings, *, marks: Marks | None = None, clock: Clock | None = None
) -> OpenAIModelClient | None:
    """The model client of the settings (None: no endpoint configured).

    With `marks` and `clock`, what the client learns of the endpoint is kept
    for every process (see `backthink.endpoint.learned`).
    """
    # Imported here: the openai SDK is the slowest import of the daemon, and the
    # commands that never call a model (messages, rounds) need not pay for it.
    from backthink.endpoint.client import OpenAIModelClient

    try:
        return OpenAIModelClient(
            settings.model, channels=list(settings.channels), marks=marks, clock=clock
        )
    except ModelNotConfiguredError:
        return None
