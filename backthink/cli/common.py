"""What every command shares: the global options, the owner they act for, JSON output."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from backthink.cli.owners import owner_tables
from backthink.config import Settings, load_settings, paths, resolve_config_path
from backthink.models import Owner

T = TypeVar("T")

OwnerOption = Annotated[
    str | None,
    typer.Option("--owner", help="Owner id (also taken before the command: backthink --owner ID)."),
]


@dataclass
class Context:
    """Options shared by every command."""

    config: Path | None
    owner: str | None
    debug: bool

    def settings(self) -> Settings:
        """Load the configuration (raises ConfigError with one clear line)."""
        return load_settings(self.config)

    def config_file(self) -> Path | None:
        """The config file this command reads (None: the built-in defaults).

        When it is a checkout's `config/backthink.toml` that hides the user's own
        config, a note on standard error says so and how to read the other one.
        """
        found = resolve_config_path(self.config, os.environ)
        notice = paths.config_notice(found, os.environ)
        if notice is not None:
            typer.echo(notice, err=True)
        return found

    def for_owner(self, settings: Settings) -> Settings:
        """The settings of the owner this command acts for: `--owner`, else the default owner.

        An owner of the config file needs no database read; one added with
        `backthink owners add` is looked up (raises InputError when unknown).
        """
        from backthink.config.owners import config_owners, owner_settings

        named = {o.id: o for o in config_owners(settings)}
        wanted = self.owner
        if wanted is None and settings.owner.id in named:
            wanted = settings.owner.id
        if wanted is not None and wanted in named:
            return owner_settings(settings, named[wanted])
        return owner_settings(settings, run_sync(stored_owner(settings, wanted)))

    def owner_id(self, settings: Settings) -> str:
        """The owner this command acts for (raises InputError for an unknown one)."""
        return self.for_owner(settings).owner.id


async def stored_owner(settings: Settings, wanted: str | None) -> Owner:
    from backthink.host.fleet import find_owner

    async with owner_tables(settings) as store:
        return await find_owner(store.owners, settings, wanted)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def command_context(ctx: typer.Context, owner: str | None) -> Context:
    """The shared options, with the command's own `--owner` when it was given one."""
    shared: Context = ctx.obj
    return shared if owner is None else replace(shared, owner=owner)
