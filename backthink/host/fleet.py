"""The fleet: every owner's App over one open database and one model client.

An owner's App is wired from the owner's settings (`owners.owner_settings`)
the first time a round needs it, and again when its row changes; apps share
the stores, the model client, the templates and persona prompts already
read. A process holds at most `CACHED_APPS` of them: wiring one is cheap
(no connection, no file read once the templates are cached), so an owner
whose app was dropped gets a new one at its next round. The registry of
live turns (`backthink.host.turns`) is the fleet's, shared by every app and
the relay, so an app rebuilt mid-round still finds the owner's round.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from importlib.resources.abc import Traversable
from pathlib import Path

import structlog

from backthink.chat_ports import ChatSession, TokenStore
from backthink.clock import SystemClock
from backthink.config import Settings
from backthink.config.owners import config_owners, owner_settings
from backthink.config.shipped import prompt_templates
from backthink.delivery.audience import Audience
from backthink.delivery.dispatcher import UNRECORDED_LOOKBACK
from backthink.errors import BackthinkError, ConfigError, InputError, StoreError
from backthink.host.app import (
    NO_OVERRIDES,
    App,
    AppOverrides,
    FromSettings,
    build_app,
    model_from_settings,
    read_persona_prompt,
)
from backthink.host.turns import LiveTurns
from backthink.models import Language, Owner
from backthink.ports import Clock, ModelClient, Outbox, OwnerStore
from backthink.records import RoundRecord
from backthink.round.prompts import PromptBook
from backthink.round.recorder import Recorder, RoundStart, unstarted_record
from backthink.round.spill import Spill
from backthink.store import open_database
from backthink.store.claims import OwnerClaims
from backthink.store.turn_locks import RoundLocks, is_postgres

log = structlog.get_logger(__name__)

CACHED_APPS = 4096
Wire = Callable[[Settings, PromptBook, str], App]
"""Builds one owner's App from its settings, templates and persona prompt."""


@dataclass(frozen=True)
class _Wired:
    owner: Owner
    app: App


class Fleet:
    """Resolves owners and hands out each one's App."""

    def __init__(
        self,
        settings: Settings,
        owners: OwnerStore,
        outbox: Outbox,
        wire: Wire,
        *,
        clock: Clock,
        model: ModelClient | None,
        claims: OwnerClaims | None = None,
        recorder: Recorder | None = None,
        session: ChatSession | None = None,
        tokens: TokenStore | None = None,
        audience: Audience | None = None,
        turns: LiveTurns | None = None,
    ) -> None:
        """Serve the owners of `owners` (an OwnerStore), wiring their apps with `wire`.

        `claims` are the distributed worker's claims on the owner table;
        `recorder` records rounds that could not start; `session` and
        `tokens` are what the API reads and writes (None: the fleet serves no
        API); `audience` the API's clients, which every app's dispatcher asks;
        `turns` the process's live turns, which `wire` hands to every app.
        """
        self.settings = settings
        self.clock = clock
        self.model = model
        self._claims = claims
        self._recorder = recorder
        self._config = {o.id: o for o in config_owners(settings)}
        self._owners = owners
        self._outbox = outbox
        self._wire = wire
        self._apps: OrderedDict[str, _Wired] = OrderedDict()
        self._settings: dict[str, tuple[Owner, Settings]] = {}
        self._books: dict[tuple[Path | Traversable, Language], PromptBook] = {}
        self._personas: dict[tuple[Path | None, str, str], str] = {}
        self._session = session
        self._tokens = tokens
        self.audience = audience
        self.turns = turns if turns is not None else LiveTurns()

    @property
    def session(self) -> ChatSession:
        """The main sessions as chat apps read and write them.

        Raises:
            ConfigError: the fleet serves no database of its own (a test's stores).
        """
        if self._session is None:
            raise ConfigError("the API needs the database's own sessions")
        return self._session

    @property
    def tokens(self) -> TokenStore:
        """The owners' API tokens.

        Raises:
            ConfigError: the fleet serves no database of its own (a test's stores).
        """
        if self._tokens is None:
            raise ConfigError("the API needs the database's own tokens")
        return self._tokens

    @property
    def claims(self) -> OwnerClaims:
        """The distributed worker's claims on the owner table.

        Raises:
            ConfigError: the fleet serves no database of its own (a test's stores).
        """
        if self._claims is None:
            raise ConfigError("the worker needs the database's owner table")
        return self._claims

    async def sync(self, at: datetime, *, strict: bool = False) -> None:
        """Write the config file's owners into the owner table (unchanged rows stay as they are).

        A database that refuses the write (read-only, locked) leaves the
        table as it was: the config file's owners are known from the file
        anyway. With `strict` (the distributed worker, which schedules from
        the table) the StoreError is raised instead.
        """
        try:
            await self._owners.sync_config(list(self._config.values()), at=at)
        except StoreError as exc:
            if strict:
                raise
            log.warning("fleet.owners_not_written", error=str(exc))

    async def owners(self) -> list[Owner]:
        """The enabled owners, by id: the config file's and the table's."""
        stored = {o.id: o for o in await self._owners.list(enabled_only=True)}
        merged = {**stored, **self._config}
        return [o for _, o in sorted(merged.items()) if o.enabled]

    async def owner(self, owner_id: str) -> Owner:
        """The enabled owner with this id (the config file's need no database read).

        Raises:
            InputError: there is none, or it is disabled.
        """
        owner = self._config.get(owner_id) or await find_owner(
            self._owners, self.settings, owner_id
        )
        if not owner.enabled:
            raise InputError(
                f"owner {owner_id!r} is disabled (backthink owners set ID enabled true)"
            )
        return owner

    async def default_owner(self) -> str:
        """The owner a command acts for without `--owner`: `[owner] id` if it is one, else the only.

        Raises:
            InputError: there are several and none is `[owner] id`.
        """
        if self.settings.owner.id in self._config:
            return self.settings.owner.id
        return (await find_owner(self._owners, self.settings, None)).id

    async def app(self, owner_id: str) -> App:
        """The owner's App, wired from its current row.

        Raises:
            InputError: no enabled owner has this id.
            ConfigError: the owner's settings cannot work.
        """
        owner = await self.owner(owner_id)
        wired = self._apps.get(owner_id)
        if wired is not None and wired.owner == owner:
            self._apps.move_to_end(owner_id)
            return wired.app
        app = self._build(owner)
        self._apps[owner_id] = _Wired(owner, app)
        self._apps.move_to_end(owner_id)
        while len(self._apps) > CACHED_APPS:
            self._apps.popitem(last=False)
        return app

    def cached(self, owner_id: str) -> App | None:
        """The owner's App if one is wired already (no database read)."""
        wired = self._apps.get(owner_id)
        return wired.app if wired is not None else None

    def settings_for(self, owner: Owner) -> Settings:
        """The owner's settings (`owners.owner_settings`), worked out once per version of its row.

        Raises:
            ConfigError: the owner's settings cannot work.
        """
        known = self._settings.get(owner.id)
        if known is not None and known[0] == owner:
            return known[1]
        settings = owner_settings(self.settings, owner)
        self._settings[owner.id] = (owner, settings)
        return settings

    def _build(self, owner: Owner) -> App:
        settings = self.settings_for(owner)
        key = (settings.prompt.dir or prompt_templates(), settings.prompt.language)
        book = self._books.get(key)
        if book is None:
            book = self._books[key] = PromptBook.load(*key)
        persona_key = (
            settings.persona.prompt_file,
            settings.persona.name or settings.persona.id,
            settings.prompt.language,
        )
        persona = self._personas.get(persona_key)
        if persona is None:
            persona = self._personas[persona_key] = read_persona_prompt(settings)
        return self._wire(settings, book, persona)

    async def record_unstarted(
        self, owner_id: str, trigger: str, error: BackthinkError
    ) -> RoundRecord | None:
        """Record a round whose app could not be wired; None when no records are kept."""
        if self._recorder is None:
            return None
        at = self.clock.now()
        start = RoundStart(uuid.uuid4().hex, owner_id, trigger, at)
        record = unstarted_record(start, error, finished=at)
        with structlog.contextvars.bound_contextvars(round_id=start.id, owner_id=owner_id):
            await self._recorder.save(record)
        return record

    async def resume(self, at: datetime) -> int:
        """Finish every owner's deliveries a previous process left; return rounds recorded.

        Each owner's are sent through its own channels; those of an owner
        that is gone (or whose settings no longer work) stay as they are, logged.
        """
        pending = await self._outbox.pending(limit=10_000)
        unrecorded = await self._outbox.unrecorded(since=at - UNRECORDED_LOOKBACK, limit=10_000)
        resumed = 0
        for owner_id in sorted({d.owner_id for d in [*pending, *unrecorded]}):
            try:
                app = await self.app(owner_id)
            except BackthinkError as exc:
                log.warning("fleet.resume_skipped", owner_id=owner_id, error=str(exc))
                continue
            resumed += await app.thinker.resume(owner_id=owner_id)
        return resumed


async def find_owner(store: OwnerStore, settings: Settings, wanted: str | None) -> Owner:
    """The owner a command acts for: `wanted`, else `[owner] id` when it is one, else the only one.

    Raises:
        InputError: no owner has that id, or there are several and none is named.
    """
    if wanted is not None:
        owner = await store.get(wanted)
        if owner is not None:
            return owner
    owners = await store.list()
    ids = [o.id for o in owners]
    shown = ", ".join(ids[:10]) + (", …" if len(ids) > 10 else "") or "none"
    if wanted is not None:
        raise InputError(f"unknown owner {wanted!r} (owners: {shown})")
    default = next((o for o in owners if o.id == settings.owner.id), None)
    if default is not None:
        return default
    if len(owners) == 1:
        return owners[0]
    raise InputError(f"several owners: pass --owner (one of {shown})")


@asynccontextmanager
async def open_fleet(
    settings: Settings, overrides: AppOverrides = NO_OVERRIDES
) -> AsyncIterator[Fleet]:
    """Open the database (migrating it) and the model client, and serve every owner on them.

    The config file's owners are written into the owner table first.
    `overrides` go to `build_app` for each owner's app (e.g. a clock).
    With the API configured and no audience given, the fleet's audience is
    one of a process that does not serve the API: it sees a client only when
    the daemon vouches for one (`backthink.host.witness`).
    Everything opened here is closed when the block ends, in reverse order.
    """
    if overrides.audience is None and settings.api.listen:
        overrides = replace(overrides, audience=Audience(settings.api.seen_window, serves=False))
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(settings.database))
        clock = overrides.clock or SystemClock()
        model = overrides.model
        if isinstance(model, FromSettings):
            model = model_from_settings(settings, marks=db.marks, clock=clock)
            if model is not None:
                stack.push_async_callback(model.close)
        spill = overrides.spill
        if spill is None and settings.database.spill_path is not None:
            spill = Spill(settings.database.spill_path)
        locks = RoundLocks(db.db.engine) if is_postgres(db.db.engine) else None
        if locks is not None:
            stack.push_async_callback(locks.close)
        turns = LiveTurns(locks)
        # Every owner's app shares the clock, the model client, the spill file and the
        # registry of live turns.
        shared = replace(overrides, clock=clock, model=model, spill=spill, turns=turns)

        def wire(owner: Settings, prompts: PromptBook, persona: str) -> App:
            parts = replace(
                shared,
                prompts=shared.prompts or prompts,
                persona_prompt=persona if shared.persona_prompt is None else shared.persona_prompt,
            )
            return build_app(owner, db, parts)

        fleet = Fleet(
            settings,
            db.owners,
            db.outbox,
            wire,
            clock=clock,
            model=model,
            claims=OwnerClaims(db.db.engine),
            recorder=Recorder(db.rounds, spill=spill),
            session=db.session,
            tokens=db.tokens,
            audience=shared.audience,
            turns=turns,
        )
        await fleet.sync(clock.now())
        if spill is not None:
            # The reserve a full disk needs is allocated while there is room for it.
            spill.prepare()
            # Records an earlier process could not save are written in first.
            await Recorder(db.rounds, spill=spill).drain(thorough=True)
        yield fleet


@asynccontextmanager
async def open_app(
    settings: Settings, *, owner: str | None = None, overrides: AppOverrides = NO_OVERRIDES
) -> AsyncIterator[App]:
    """Open the database and the model client, and wire one owner's app on them.

    `owner` defaults to `[owner] id`, or the only owner. `overrides` go to
    `build_app` (e.g. a clock). Everything opened here is closed when the
    block ends, in reverse order, whatever happens.

    Raises:
        InputError: no enabled owner has this id (or several and none is given).
    """
    async with open_fleet(settings, overrides) as fleet:
        yield await fleet.app(owner or await fleet.default_owner())
