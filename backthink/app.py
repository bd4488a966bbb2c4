"""Wiring: settings -> stores, state provider, model client, thinker."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from backthink.channels import build_channels
from backthink.config import Settings
from backthink.delivery import Dispatcher
from backthink.errors import ConfigError, ModelNotConfiguredError
from backthink.model_client import OpenAIModelClient
from backthink.ports import Channel
from backthink.prompts import PromptBook
from backthink.round import Thinker
from backthink.state import FileStateProvider
from backthink.store import Database, SqlMessageStore, SqlOutbox, SqlRoundStore, open_store


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """Return the current instant."""
        return datetime.now(UTC)


MODEL_MISSING_HINT = (
    "no model endpoint configured: set model.base_url in the config file "
    "or BACKTHINK_MODEL__BASE_URL (and model.api_key or OPENAI_API_KEY)"
)


def read_persona_prompt(settings: Settings) -> str:
    """Read the persona system prompt; no file configured means a one-line default.

    Raises:
        ConfigError: the configured file cannot be read.
    """
    path = settings.persona.prompt_file
    if path is None:
        name = settings.persona.name or settings.persona.id
        return (
            f"You are {name}, a warm AI companion."
            if settings.prompt.language == "en"
            else (f"你是{name}，一位温暖的 AI 伙伴。")
        )
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"persona.prompt_file: cannot read {path}: {exc.strerror}") from None


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
    db: Database
    messages: SqlMessageStore
    rounds: SqlRoundStore
    outbox: SqlOutbox
    channels: dict[str, Channel]
    dispatcher: Dispatcher
    model: OpenAIModelClient | None
    thinker: Thinker
    clock: SystemClock


@asynccontextmanager
async def open_app(settings: Settings) -> AsyncIterator[App]:
    """Open the database (migrating it), build the model client and the thinker."""
    prompts = PromptBook.load(settings.prompt.dir, settings.prompt.language)
    persona_prompt = read_persona_prompt(settings)
    channels = build_channels(settings.channels)
    db, messages, rounds = await open_store(
        settings.database.url, busy_timeout_ms=settings.database.busy_timeout_ms
    )
    outbox = SqlOutbox(db)
    model: OpenAIModelClient | None
    try:
        model = OpenAIModelClient(settings.model)
    except ModelNotConfiguredError:
        model = None
    clock = SystemClock()
    dispatcher = Dispatcher(outbox, channels, clock)
    thinker = Thinker(
        settings,
        messages=messages,
        rounds=rounds,
        outbox=outbox,
        channels=channels,
        dispatcher=dispatcher,
        state=FileStateProvider(settings.state.file, settings.state.max_age),
        model=model,
        clock=clock,
        prompts=prompts,
        persona_prompt=persona_prompt,
        model_missing_hint=MODEL_MISSING_HINT,
    )
    try:
        yield App(
            settings, db, messages, rounds, outbox, channels, dispatcher, model, thinker, clock
        )
    finally:
        if model is not None:
            await model.close()
        await db.dispose()
