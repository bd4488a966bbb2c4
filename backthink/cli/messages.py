"""`backthink messages`: the owner's main session, added to or imported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from backthink.cli.common import OwnerOption, command_context, run_sync
from backthink.errors import InputError

messages_app = typer.Typer(
    help="Add or import main-session messages.", no_args_is_help=True, rich_markup_mode=None
)


@messages_app.command("add")
def messages_add(
    ctx: typer.Context,
    role: Annotated[str, typer.Option("--role", help="user, assistant or system.")],
    text: Annotated[
        str, typer.Option("--text", help="The message text, or - to read it from standard input.")
    ],
    channel: Annotated[str | None, typer.Option("--channel")] = None,
    speaker: Annotated[
        str | None, typer.Option("--speaker", help="Persona id of an assistant message.")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Image URL or data URI.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="ISO 8601 time (default: now).")] = None,
    owner: OwnerOption = None,
) -> None:
    """Add one message to the main session."""
    from backthink.host.app import SystemClock
    from backthink.store import open_database
    from backthink.store.importing import IMPORT_MAX_CHARS, parse_one

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    if text == "-":
        # One more character than allowed is enough to refuse a text that is too long.
        text = sys.stdin.read(IMPORT_MAX_CHARS + 1).rstrip("\n")
    data: dict[str, Any] = {
        "role": role,
        "text": text,
        "channel": channel,
        "speaker": speaker,
        "image": image,
    }
    if at is not None:
        data["at"] = at
    message = parse_one(
        data,
        where="messages add",
        owner_id=settings.owner.id,
        now=SystemClock().now(),
        tz=settings.owner.tz,
    )

    async def go() -> int | None:
        async with open_database(settings.database) as store:
            return (await store.messages.add(message)).id

    typer.echo(f"added message {run_sync(go())}")


@messages_app.command("import")
def messages_import(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="JSON Lines: role, text, and optional channel, speaker, image, at."),
    ],
    owner: OwnerOption = None,
) -> None:
    """Import messages from a JSON Lines file, all or nothing."""
    from backthink.host.app import SystemClock
    from backthink.store import open_database
    from backthink.store.importing import parse_jsonl

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    parsed = parse_jsonl(
        text.splitlines(),
        source=str(file),
        owner_id=settings.owner.id,
        now=SystemClock().now(),
        tz=settings.owner.tz,
    )

    async def go() -> int:
        async with open_database(settings.database) as store:
            count = await store.messages.add_many(parsed)
            # Rounds index new messages a batch at a time; an import is indexed at once,
            # so what it brought is recallable from the next round on.
            await store.memories.index()
            return count

    typer.echo(f"imported {run_sync(go())} messages from {file}")
