"""`backthink messages`: the owner's main session, added to, imported or listed."""

from __future__ import annotations

import sys
import unicodedata
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from backthink.cli.common import OwnerOption, command_context, run_sync
from backthink.errors import InputError

if TYPE_CHECKING:
    from backthink.models import SessionEntry

messages_app = typer.Typer(
    help="Add, import or list main-session messages.", no_args_is_help=True, rich_markup_mode=None
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
    from backthink.clock import SystemClock
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
    from backthink.clock import SystemClock
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


LIST_MAX = 10_000  # messages `messages list` prints at most


@messages_app.command("list")
def messages_list(
    ctx: typer.Context,
    limit: Annotated[
        int, typer.Option("--limit", min=0, max=LIST_MAX, help="How many of the newest.")
    ] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"messages": [...]} as GET /v1/messages does.')
    ] = False,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Also the turns an edit in a chat app left behind (superseded)."
        ),
    ] = False,
    owner: OwnerOption = None,
) -> None:
    """Show the main session, oldest first: what was said, and what the companion pushed."""
    from backthink.cli.common import print_json
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())

    async def go() -> list[SessionEntry]:
        async with open_database(settings.database, write=False) as store:
            found = await store.session.page(
                settings.owner.id, after=None, limit=limit, every=every
            )
            return found or []

    entries = run_sync(go())
    if as_json:
        print_json({"messages": [e.to_json() for e in entries]})
        return
    if not entries:
        typer.echo("no messages yet")
        return
    tz = settings.owner.tz
    for entry in entries:
        typer.echo(_line(entry, tz))


def _line(entry: SessionEntry, tz: tzinfo) -> str:
    """One readable line: id, local time, who, where, and the text on one line, made inert."""
    m = entry.message
    who = m.role if m.speaker is None else f"{m.role}:{_shown(m.speaker)}"
    where = [_shown(m.channel or "session")]
    if entry.delivery is not None:
        where.insert(0, f"push {entry.delivery}")
    if m.superseded:
        where.append("superseded")
    text = _shown(" ".join(m.text.split()))
    if len(text) > LINE_CHARS:
        text = text[: LINE_CHARS - 1] + "…"
    at = m.created_at.astimezone(tz).strftime("%Y-%m-%d %H:%M")
    return f"{m.id:>6}  {at}  {who}  [{', '.join(where)}]  {text}"


LINE_CHARS = 120  # characters of a message's text `messages list` shows on its line
# Characters that reorder the text around them on a terminal (bidirectional overrides).
_BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _shown(text: str) -> str:
    """`text` with control characters written out (`\\x1b`), so a message cannot drive the terminal.

    Messages come from chat apps: an escape sequence in one would otherwise
    recolour, retitle or rewrite the terminal that lists them.
    """
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS
        else ch
        for ch in text
    )
