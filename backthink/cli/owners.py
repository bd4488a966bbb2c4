"""`backthink owners`: add, list, change and remove the owners kept in the database; API tokens.

The config file's owners (`[owner]`, `[owners.ID]`) are listed too, and
written into the table at every start; they are changed in the file, not
here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer

from backthink.errors import InputError
from backthink.models import Owner

if TYPE_CHECKING:
    from backthink.config import Settings
    from backthink.store import SqlStores

T = TypeVar("T")

owners_app = typer.Typer(
    help="Add, list, change or remove owners (who the companions serve).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@asynccontextmanager
async def owner_tables(settings: Settings) -> AsyncIterator[SqlStores]:
    """The open database, with the config file's owners written into its owner table."""
    from backthink.clock import SystemClock
    from backthink.config.owners import config_owners
    from backthink.store import open_database

    async with open_database(settings.database) as store:
        await store.owners.sync_config(config_owners(settings), at=SystemClock().now())
        yield store


def _with_store(ctx: typer.Context, fn: Callable[[SqlStores, Settings], Awaitable[T]]) -> T:
    """Open the database, write the config file's owners in, and run `fn` on it."""
    settings: Settings = ctx.obj.settings()

    async def go() -> T:
        async with owner_tables(settings) as store:
            return await fn(store, settings)

    return asyncio.run(go())


def _checked(settings: Settings, owner: Owner) -> Owner:
    """The owner, once its settings are known to work (raises ConfigError naming the key)."""
    from backthink.config.owners import owner_settings

    owner_settings(settings, owner)
    return owner


def _managed(owner: Owner | None, owner_id: str) -> Owner:
    if owner is None:
        raise InputError(f"unknown owner {owner_id!r} (backthink owners list)")
    if owner.source == "config":
        raise InputError(
            f"owner {owner_id!r} is defined in the config file: change it there "
            "(its rows are rewritten from the file at every start)"
        )
    return owner


@owners_app.command("add")
def owners_add(
    ctx: typer.Context,
    owner_id: Annotated[str, typer.Argument(metavar="ID", help="The new owner's id.")],
    name: Annotated[str, typer.Option("--name", help="How the companion calls them.")] = "",
    timezone: Annotated[
        str, typer.Option("--timezone", help="IANA time zone, e.g. Europe/Berlin.")
    ] = "UTC",
    language: Annotated[
        str | None, typer.Option("--language", help="zh or en (default: prompt.language).")
    ] = None,
) -> None:
    """Add an owner; the running daemon starts its heartbeats within a minute."""
    from pydantic import ValidationError

    from backthink.clock import SystemClock

    if language not in (None, "zh", "en"):
        raise InputError(f"--language: {language!r} is not zh or en")
    lang: Literal["zh", "en"] | None = language  # type: ignore[assignment]
    try:
        owner = Owner(id=owner_id, name=name, timezone=timezone, language=lang)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in err["loc"])
        raise InputError(f"{field}: {str(err['msg']).removeprefix('Value error, ')}") from None

    async def add(store: SqlStores, settings: Settings) -> None:
        if await store.owners.get(owner_id) is not None:
            raise InputError(
                f"owner {owner_id!r} exists (change it: backthink owners set {owner_id} KEY VALUE)"
            )
        await store.owners.put(_checked(settings, owner), at=SystemClock().now())

    _with_store(ctx, add)
    typer.echo(f"added owner {owner_id}")


@owners_app.command("list")
def owners_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show every owner: the config file's and those added here."""
    from backthink.config.owners import redacted

    async def read(store: SqlStores, settings: Settings) -> list[Owner]:
        return await store.owners.list()

    owners = _with_store(ctx, read)
    if as_json:
        typer.echo(json.dumps([redacted(o) for o in owners], ensure_ascii=False, indent=2))
        return
    rows = [("id", "name", "timezone", "language", "enabled", "source", "overrides")]
    for o in owners:
        overrides = [*(f"gate.{k}" for k in o.gate), *(f"channels.{k}" for k in o.channels)]
        overrides += [k for k in ("persona", "state_file") if getattr(o, k) is not None]
        rows.append(
            (
                o.id,
                o.name or "-",
                o.timezone,
                o.language or "-",
                "yes" if o.enabled else "no",
                o.source,
                ", ".join(overrides) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@owners_app.command("set")
def owners_set(
    ctx: typer.Context,
    owner_id: Annotated[str, typer.Argument(metavar="ID", help="The owner's id.")],
    key: Annotated[
        str,
        typer.Argument(
            metavar="KEY",
            help="name, timezone, language, persona, state_file, enabled, gate.KEY "
            "or channels.NAME.KEY",
        ),
    ],
    value: Annotated[str, typer.Argument(metavar="VALUE", help='The value; "" unsets it.')],
) -> None:
    """Change one key of an owner; the next round uses it."""
    from backthink.clock import SystemClock
    from backthink.config.owners import set_key

    async def change(store: SqlStores, settings: Settings) -> None:
        owner = _managed(await store.owners.get(owner_id), owner_id)
        await store.owners.put(
            _checked(settings, set_key(owner, key, value)), at=SystemClock().now()
        )

    _with_store(ctx, change)
    typer.echo(f"owner {owner_id}: {key} set")


@owners_app.command("remove")
def owners_remove(
    ctx: typer.Context,
    owner_id: Annotated[str, typer.Argument(metavar="ID", help="The owner's id.")],
) -> None:
    """Remove an owner: no more rounds; its messages, rounds and memories stay."""

    async def remove(store: SqlStores, settings: Settings) -> Any:
        _managed(await store.owners.get(owner_id), owner_id)
        await store.tokens.revoke(owner_id)
        return await store.owners.remove(owner_id)

    _with_store(ctx, remove)
    typer.echo(f"removed owner {owner_id}")


@owners_app.command("token")
def owners_token(
    ctx: typer.Context,
    owner_id: Annotated[str, typer.Argument(metavar="ID", help="The owner's id.")],
    revoke: Annotated[
        bool, typer.Option("--revoke", help="Delete every token of the owner instead.")
    ] = False,
) -> None:
    """Print a new API token for the owner (shown once; only its digest is kept)."""
    from backthink.clock import SystemClock

    async def issue(store: SqlStores, settings: Settings) -> str:
        if await store.owners.get(owner_id) is None:
            raise InputError(f"unknown owner {owner_id!r} (backthink owners list)")
        if revoke:
            return f"revoked {await store.tokens.revoke(owner_id)} token(s) of owner {owner_id}"
        return await store.tokens.issue(owner_id, at=SystemClock().now())

    typer.echo(_with_store(ctx, issue))
