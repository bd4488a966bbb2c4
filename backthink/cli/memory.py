"""`backthink memory`: long-term memories, added, listed, searched or forgotten."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from backthink.cli.common import OwnerOption, command_context, print_json, run_sync
from backthink.config import Settings
from backthink.errors import InputError
from backthink.models import Memory, MemoryKind

memory_app = typer.Typer(
    help="Add, list, search or forget long-term memories.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class _Writable(StrEnum):
    NOTE = "note"
    PROFILE = "profile"


@memory_app.command("add")
def memory_add(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="What to remember.")],
    kind: Annotated[_Writable, typer.Option("--kind", help="note or profile.")] = _Writable.NOTE,
    owner: OwnerOption = None,
) -> None:
    """Remember TEXT for the owner."""
    from backthink.clock import SystemClock
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    if not text.strip():
        raise InputError("memory add: the text is empty")
    memory = Memory(
        owner_id=settings.owner.id,
        kind=MemoryKind(kind.value),
        text=text,
        created_at=SystemClock().now(),
        source="cli",
    )

    async def go() -> Memory:
        async with open_database(settings.database) as store:
            return await store.memories.add(memory)

    typer.echo(f"added memory {run_sync(go()).id}")


@memory_app.command("list")
def memory_list(
    ctx: typer.Context,
    kind: Annotated[
        MemoryKind | None, typer.Option("--kind", help="note, profile or thought (default: all).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many memories.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    owner: OwnerOption = None,
) -> None:
    """Show the owner's memories, newest first."""
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())

    owner_id = settings.owner.id

    async def go() -> list[Memory]:
        async with open_database(settings.database, write=False) as store:
            return await store.memories.list(owner_id, kind=kind, limit=limit)

    _print_memories(run_sync(go()), settings, as_json=as_json)


@memory_app.command("search")
def memory_search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Words that must all appear (any case).")],
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many memories.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    owner: OwnerOption = None,
) -> None:
    """Find the owner's memories holding every word of QUERY, newest first."""
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())

    owner_id = settings.owner.id

    async def go() -> list[Memory]:
        async with open_database(settings.database) as store:
            return await store.memories.search(owner_id, query, limit=limit)

    _print_memories(run_sync(go()), settings, as_json=as_json)


@memory_app.command("forget")
def memory_forget(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="The memory's id.")],
    owner: OwnerOption = None,
) -> None:
    """Forget one memory: its text is gone from every table and index."""
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id

    async def go() -> bool:
        async with open_database(settings.database) as store:
            return await store.memories.forget(owner_id, memory_id)

    if not run_sync(go()):
        typer.echo(f"backthink: no memory {memory_id} for owner {owner_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"forgot memory {memory_id}")


def _print_memories(memories: list[Memory], settings: Settings, *, as_json: bool) -> None:
    if as_json:
        print_json(
            [
                {
                    "id": m.id,
                    "kind": m.kind.value,
                    "text": m.text,
                    "created_at": m.created_at,
                    "source": m.source,
                }
                for m in memories
            ]
        )
        return
    if not memories:
        typer.echo("no memories")
        return
    for m in memories:
        at = m.created_at.astimezone(settings.owner.tz).strftime("%Y-%m-%d %H:%M")
        # One line per memory: a newline in the text would read as another memory.
        typer.echo(f"{m.id}  {at}  {m.kind.value:<7}  {' '.join(m.text.split())}")
