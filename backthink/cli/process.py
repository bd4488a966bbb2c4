"""The commands of the long-running processes: run, worker, poke, pause, resume, status."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from backthink.cli.common import Context, OwnerOption, command_context, print_json, run_sync
from backthink.host import logs
from backthink.models import Outcome

if TYPE_CHECKING:
    from backthink.config import Settings
    from backthink.host.daemon import OpenDoors


def run(ctx: typer.Context) -> None:
    """Run the daemon: startup greeting, heartbeats, cron triggers, delivery."""
    from backthink.host.daemon import run_daemon

    c: Context = ctx.obj
    settings = c.settings()
    logs.configure(stream=sys.stdout, level="debug" if c.debug else "info")
    # Without --owner the daemon serves every enabled owner, and new ones as they are added.
    only = [c.owner_id(settings)] if c.owner is not None else None
    raise typer.Exit(run_sync(run_daemon(settings, owners=only, doors=_doors(settings))))


def _doors(settings: Settings) -> OpenDoors | None:
    """The HTTP doors the configuration asks for: the page, the API, one listener or two.

    Each is imported only when asked for: without [web] or [api] listen the
    daemon never loads their modules.
    """
    from backthink.host.daemon import all_doors

    openers: list[OpenDoors] = []
    shared = settings.api.listen and settings.api.listen == settings.web.listen
    if settings.web.listen and not shared:
        from backthink.web import open_page

        openers.append(open_page)
    if settings.api.listen:
        from backthink.api import open_api

        page = None
        if shared:
            from backthink.web import page_app

            page = page_app
        openers.append(functools.partial(open_api, page=page))
    if not openers:
        return None
    return openers[0] if len(openers) == 1 else all_doors(*openers)


def worker(ctx: typer.Context) -> None:
    """Run rounds for every owner from the queue on PostgreSQL; start one per machine or more."""
    from backthink.host.worker import serve

    c: Context = ctx.obj
    settings = c.settings()
    logs.configure(stream=sys.stdout, level="debug" if c.debug else "info")
    raise typer.Exit(run_sync(serve(settings)))


def poke_cmd(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="Why to think now, e.g. an upcoming calendar item.")],
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the round.")
    ] = 300,
    owner: OwnerOption = None,
) -> None:
    """Ask the running daemon for a round now, with TEXT as the trigger."""
    from backthink.host.poke import PUBLIC_FIELDS, NoDaemonError, poke

    c = command_context(ctx, owner)
    settings = c.settings()
    owner = c.owner_id(settings) if c.owner else None
    try:
        answer = run_sync(poke(settings.daemon.socket, text, owner_id=owner, timeout_s=timeout))
    except NoDaemonError:
        if not settings.database.url.startswith("postgresql"):
            raise
        # No daemon here: the workers on PostgreSQL take it as a queued round.
        from backthink.host.queue import poke_queued

        summary = run_sync(poke_queued(settings, owner, text, timeout_s=timeout)).summary()
        answer = {key: summary[key] for key in PUBLIC_FIELDS}
    print_json(answer)
    if answer.get("outcome") == Outcome.FAILED:
        raise typer.Exit(1)


def pause_cmd(
    ctx: typer.Context,
    length: Annotated[
        str | None,
        typer.Option(
            "--for", metavar="DURATION", help="End the pause by itself after e.g. 30m, 2h, 1d."
        ),
    ] = None,
    owner: OwnerOption = None,
) -> None:
    """Pause the owner's rounds (every trigger) until resumed, or for a while."""
    from backthink.clock import SystemClock
    from backthink.round.pause import Pauses, parse_pause_duration
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id
    duration = None if length is None else parse_pause_duration(length)

    async def go() -> str:
        async with open_database(settings.database) as store:
            held = await Pauses(store.marks).pause(
                owner_id, at=SystemClock().now(), length=duration
            )
            return held.describe(settings.owner.tz)

    until = "then" if duration is not None else "`backthink resume`"
    typer.echo(f"{run_sync(go())}: every round is skipped until {until}")


def resume_cmd(ctx: typer.Context, owner: OwnerOption = None) -> None:
    """End a pause: rounds run again from the next trigger on."""
    from backthink.clock import SystemClock
    from backthink.round.pause import Pauses
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id

    async def go() -> bool:
        async with open_database(settings.database) as store:
            return (await Pauses(store.marks).resume(owner_id, at=SystemClock().now())).paused

    typer.echo("resumed: rounds run again" if run_sync(go()) else "not paused: rounds run as usual")


def status_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    owner: OwnerOption = None,
) -> None:
    """Show whether the daemon runs, the pause, the last round, deliveries, channels and model."""
    from backthink.clock import SystemClock
    from backthink.host.status import gather

    c = command_context(ctx, owner)
    config = c.config_file()
    settings = c.for_owner(c.settings())
    found = run_sync(gather(settings, settings.owner.id, at=SystemClock().now()))
    if as_json:
        print_json(found.to_json())
    else:
        typer.echo(f"config: {config or 'built-in defaults'}")
        typer.echo(found.render(settings.owner.tz))
