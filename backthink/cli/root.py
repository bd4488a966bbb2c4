"""The `backthink` command line: parses arguments, calls services, prints results."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from backthink.cli.owners import owner_tables, owners_app
from backthink.cli.setup import init_cmd, service_app
from backthink.config import Settings, load_settings, resolve_config_path
from backthink.errors import BackthinkError, InputError
from backthink.host import logs
from backthink.models import Memory, MemoryKind, Outcome, Owner
from backthink.records import RoundRecord
from backthink.redact import redact_urls

T = TypeVar("T")

app = typer.Typer(
    name="backthink",
    help="A proactive-companion daemon: heartbeat rounds, a push gate, one channel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: switches read as `--dry-run`, not `--dry-run <bool>`.
    rich_markup_mode=None,
)
messages_app = typer.Typer(
    help="Add or import main-session messages.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(messages_app, name="messages")
memory_app = typer.Typer(
    help="Add, list, search or forget long-term memories.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(memory_app, name="memory")
app.add_typer(owners_app, name="owners")
app.command("init")(init_cmd)
app.add_typer(service_app, name="service")


@dataclass
class Context:
    """Options shared by every command."""

    config: Path | None
    owner: str | None
    debug: bool

    def settings(self) -> Settings:
        """Load the configuration (raises ConfigError with one clear line)."""
        return load_settings(self.config)

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
        return owner_settings(settings, _run(_stored_owner(settings, wanted)))

    def owner_id(self, settings: Settings) -> str:
        """The owner this command acts for (raises InputError for an unknown one)."""
        return self.for_owner(settings).owner.id


async def _stored_owner(settings: Settings, wanted: str | None) -> Owner:
    from backthink.host.fleet import find_owner

    async with owner_tables(settings) as store:
        return await find_owner(store.owners, settings, wanted)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@app.callback()
def main_options(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Config file (default: $BACKTHINK_CONFIG, ./config/backthink.toml, "
            "~/.config/backthink/backthink.toml, /etc/backthink/backthink.toml).",
        ),
    ] = None,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Owner id (default: owner.id).")
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
) -> None:
    """backthink: gives an AI companion a life between conversations."""
    ctx.obj = Context(config=config, owner=owner, debug=debug)
    # One-shot commands print their own result; their log shows only warnings and errors.
    logs.configure(stream=sys.stderr, level="debug" if debug else "warning")


@app.command()
def run(ctx: typer.Context) -> None:
    """Run the daemon: startup greeting, heartbeats, cron triggers, delivery."""
    from backthink.host.daemon import run_daemon

    c: Context = ctx.obj
    settings = c.settings()
    logs.configure(stream=sys.stdout, level="debug" if c.debug else "info")
    # Without --owner the daemon serves every enabled owner, and new ones as they are added.
    only = [c.owner_id(settings)] if c.owner is not None else None
    raise typer.Exit(_run(run_daemon(settings, owners=only)))


@app.command()
def worker(ctx: typer.Context) -> None:
    """Run rounds for every owner from the queue on PostgreSQL; start one per machine or more."""
    from backthink.host.worker import serve

    c: Context = ctx.obj
    settings = c.settings()
    logs.configure(stream=sys.stdout, level="debug" if c.debug else "info")
    raise typer.Exit(_run(serve(settings)))


@app.command()
def think(
    ctx: typer.Context,
    trigger: Annotated[
        str, typer.Option("--trigger", help="heartbeat, startup, cron or free text.")
    ] = "heartbeat",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the exact request the endpoint would get; call nothing."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run one round now and record it."""
    from backthink.host.fleet import open_app

    c: Context = ctx.obj
    settings = c.settings()
    owner_id = c.owner_id(settings)

    async def go() -> RoundRecord | dict[str, Any]:
        async with open_app(settings, owner=owner_id) as a:
            if dry_run:
                from backthink.model.client import request_body

                request = await a.thinker.prepare(owner_id, trigger)
                tools = await a.thinker.offered_tools(owner_id)
                return request_body(
                    settings.model, request.messages, tools=tools, channels=list(settings.channels)
                )
            return await a.thinker.run_round(owner_id, trigger)

    result = _run(go())
    if isinstance(result, dict):
        if as_json:
            _print_json(result)
        else:
            _print_request(result, has_key=settings.model.api_key is not None)
        return
    record = result
    if as_json:
        summary = record.summary()
        _print_json(
            {
                k: summary[k]
                for k in ("round_id", "trigger", "outcome", "reason", "channel", "decision")
            }
        )
    else:
        _print_round(record)
    if record.outcome is Outcome.FAILED:
        if as_json:
            for note in record.notes:
                typer.echo(f"backthink: {note}", err=True)
        raise typer.Exit(1)


def _print_request(body: dict[str, Any], *, has_key: bool) -> None:
    """Print a chat-completions request as the endpoint receives it, the key redacted."""
    typer.echo("POST /chat/completions")
    typer.echo(f"Authorization: Bearer {'<redacted>' if has_key else '(no key)'}")
    typer.echo(f"model: {body['model']}")
    typer.echo(f"max_tokens: {body['max_tokens']}")
    if "response_format" in body:
        schema = body["response_format"]["json_schema"]
        typer.echo(f"response_format: json_schema {schema['name']} (strict)")
    for tool in body.get("tools", []):
        function = tool["function"]
        typer.echo(f"tool: {function['name']}: {function['description']}")
    for i, m in enumerate(body["messages"], start=1):
        typer.echo(f"--- {i} {m['role']} ---")
        content = m["content"]
        if isinstance(content, str):
            typer.echo(content)
            continue
        for part in content:
            if part["type"] == "text":
                typer.echo(part["text"])
            else:
                typer.echo(f"[image: {part['image_url']['url']}]")


def _print_round(record: RoundRecord) -> None:
    typer.echo(
        f"round {record.id[:12]} ({record.trigger}): {record.outcome.value} / {record.reason}"
    )
    if record.push is not None:
        decided = "push" if record.push else "no push"
        channel = record.decided_channel or "auto"
        urgency = record.urgency.value if record.urgency else "routine"
        typer.echo(f"decision: {decided}, urgency {urgency}, channel {channel}")
    if record.body:
        typer.echo(f"body: {record.body}")
    if record.channel:
        typer.echo(f"channel: {record.channel}")
    if record.prompt_tokens is not None or record.latency_ms is not None:
        typer.echo(
            f"model: {record.model}, tokens {record.prompt_tokens}/{record.completion_tokens}, "
            f"{record.latency_ms:.0f} ms"
            if record.latency_ms is not None
            else f"model: {record.model}"
        )
    for note in record.notes:
        typer.echo(f"note: {note}")


@messages_app.command("add")
def messages_add(
    ctx: typer.Context,
    role: Annotated[str, typer.Option("--role", help="user, assistant or system.")],
    text: Annotated[str, typer.Option("--text", help="The message text.")],
    channel: Annotated[str | None, typer.Option("--channel")] = None,
    speaker: Annotated[
        str | None, typer.Option("--speaker", help="Persona id of an assistant message.")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Image URL or data URI.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="ISO 8601 time (default: now).")] = None,
) -> None:
    """Add one message to the main session."""
    from backthink.host.app import SystemClock
    from backthink.store import open_database
    from backthink.store.importing import parse_one

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())
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

    typer.echo(f"added message {_run(go())}")


@messages_app.command("import")
def messages_import(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="JSON Lines: role, text, and optional channel, speaker, image, at."),
    ],
) -> None:
    """Import messages from a JSON Lines file, all or nothing."""
    from backthink.host.app import SystemClock
    from backthink.store import open_database
    from backthink.store.importing import parse_jsonl

    c: Context = ctx.obj
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

    typer.echo(f"imported {_run(go())} messages from {file}")


class _Writable(StrEnum):
    NOTE = "note"
    PROFILE = "profile"


@memory_app.command("add")
def memory_add(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="What to remember.")],
    kind: Annotated[_Writable, typer.Option("--kind", help="note or profile.")] = _Writable.NOTE,
) -> None:
    """Remember TEXT for the owner."""
    from backthink.host.app import SystemClock
    from backthink.store import open_database

    c: Context = ctx.obj
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

    typer.echo(f"added memory {_run(go()).id}")


@memory_app.command("list")
def memory_list(
    ctx: typer.Context,
    kind: Annotated[
        MemoryKind | None, typer.Option("--kind", help="note, profile or thought (default: all).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many memories.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show the owner's memories, newest first."""
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())

    owner_id = settings.owner.id

    async def go() -> list[Memory]:
        async with open_database(settings.database) as store:
            return await store.memories.list(owner_id, kind=kind, limit=limit)

    _print_memories(_run(go()), settings, as_json=as_json)


@memory_app.command("search")
def memory_search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Words that must all appear (any case).")],
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many memories.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Find the owner's memories holding every word of QUERY, newest first."""
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())

    owner_id = settings.owner.id

    async def go() -> list[Memory]:
        async with open_database(settings.database) as store:
            return await store.memories.search(owner_id, query, limit=limit)

    _print_memories(_run(go()), settings, as_json=as_json)


@memory_app.command("forget")
def memory_forget(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="The memory's id.")],
) -> None:
    """Forget one memory: its text is gone from every table and index."""
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id

    async def go() -> bool:
        async with open_database(settings.database) as store:
            return await store.memories.forget(owner_id, memory_id)

    if not _run(go()):
        typer.echo(f"backthink: no memory {memory_id} for owner {owner_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"forgot memory {memory_id}")


def _print_memories(memories: list[Memory], settings: Settings, *, as_json: bool) -> None:
    if as_json:
        _print_json(
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


@app.command()
def rounds(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many rounds.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show the audit log of rounds, newest first."""
    from backthink.round.record import Recorder, Spill
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())

    async def go() -> list[RoundRecord]:
        async with open_database(settings.database) as store:
            if (spill := settings.database.spill_path) is not None:
                # Rounds another process could not save belong in the log shown.
                await Recorder(store.rounds, spill=Spill(spill)).drain(thorough=True)
            return await store.rounds.list(owner_id=settings.owner.id, limit=limit)

    records = _run(go())
    if as_json:
        _print_json([r.summary() for r in records])
        return
    typer.echo(render_rounds_table(records, settings))


def render_rounds_table(records: list[RoundRecord], settings: Settings) -> str:
    """Render rounds as a readable fixed-width table in the owner's time zone."""
    header = (
        "started",
        "round",
        "trigger",
        "outcome",
        "reason",
        "channel",
        "urgency",
        "tokens",
        "ms",
        "tools",
    )
    rows = [header]
    for r in records:
        tokens = "-" if r.prompt_tokens is None else f"{r.prompt_tokens}/{r.completion_tokens}"
        rows.append(
            (
                r.started_at.astimezone(settings.owner.tz).strftime("%m-%d %H:%M:%S"),
                r.id[:8],
                r.trigger if len(r.trigger) <= 16 else r.trigger[:15] + "…",
                r.outcome.value,
                r.reason,
                r.channel or "-",
                r.urgency.value if r.urgency else "-",
                tokens,
                "-" if r.latency_ms is None else f"{r.latency_ms:.0f}",
                _tool_count(r),
            )
        )
    if len(rows) == 1:
        return "no rounds yet"
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _tool_count(record: RoundRecord) -> str:
    """How many tool calls a round made, and how many failed: "3", "3 (1 failed)", "-"."""
    if not record.tools:
        return "-"
    failed = sum(1 for use in record.tools if not use.ok)
    return f"{len(record.tools)} ({failed} failed)" if failed else str(len(record.tools))


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="Scenarios, JSON Lines (e.g. eval/scenarios.jsonl).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=100, help="Runs per scenario.")] = 1,
) -> None:
    """Score the companion's judgment on scenarios, in isolation: no database, no channels."""
    from backthink.evaluation.figures import render_table
    from backthink.evaluation.runner import Evaluation, config_owner_settings, run_eval
    from backthink.evaluation.scenarios import load_scenarios
    from backthink.model.client import OpenAIModelClient

    c: Context = ctx.obj
    settings = config_owner_settings(c.settings(), c.owner)
    owner_id = settings.owner.id
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    loaded = load_scenarios(text.splitlines(), source=str(file), owner_tz=settings.owner.tz)
    for problem in loaded.problems:
        typer.echo(f"backthink: {problem}", err=True)
    if not loaded.scenarios:
        raise InputError(f"{file}: no valid scenario to run")

    async def go() -> Evaluation:
        async with OpenAIModelClient(settings.model, channels=list(settings.channels)) as model:
            return await run_eval(
                settings, loaded.scenarios, model=model, owner_id=owner_id, repeat=repeat
            )

    evaluation = _run(go())
    data = evaluation.to_json(invalid=loaded.problems)
    if as_json:
        _print_json(data)
    else:
        typer.echo(render_table(data, evaluation.results))


@app.command()
def check(ctx: typer.Context) -> None:
    """Validate config, prompts, database and model endpoint; exit 1 on the first problem."""
    from backthink.host.checks import run_checks

    c: Context = ctx.obj
    settings = c.settings()
    where = resolve_config_path(c.config, os.environ)
    typer.echo(f"ok  config: {where or 'built-in defaults'}")

    async def go() -> None:
        async for line in run_checks(settings):
            typer.echo(f"ok  {line}")

    _run(go())


@app.command("poke")
def poke_cmd(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="Why to think now, e.g. an upcoming calendar item.")],
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the round.")
    ] = 300,
) -> None:
    """Ask the running daemon for a round now, with TEXT as the trigger."""
    from backthink.host.poke import PUBLIC_FIELDS, NoDaemonError, poke

    c: Context = ctx.obj
    settings = c.settings()
    owner = c.owner_id(settings) if c.owner else None
    try:
        answer = _run(poke(settings.daemon.socket, text, owner_id=owner, timeout_s=timeout))
    except NoDaemonError:
        if not settings.database.url.startswith("postgresql"):
            raise
        # No daemon here: the workers on PostgreSQL take it as a queued round.
        from backthink.host.worker import poke_queued

        summary = _run(poke_queued(settings, owner, text, timeout_s=timeout)).summary()
        answer = {key: summary[key] for key in PUBLIC_FIELDS}
    _print_json(answer)
    if answer.get("outcome") == Outcome.FAILED:
        raise typer.Exit(1)


@app.command("pause")
def pause_cmd(
    ctx: typer.Context,
    length: Annotated[
        str | None,
        typer.Option(
            "--for", metavar="DURATION", help="End the pause by itself after e.g. 30m, 2h, 1d."
        ),
    ] = None,
) -> None:
    """Pause the owner's rounds (every trigger) until resumed, or for a while."""
    from backthink.host.app import SystemClock
    from backthink.round.pause import Pauses, parse_pause_duration
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id
    duration = None if length is None else parse_pause_duration(length)

    async def go() -> str:
        async with open_database(settings.database) as store:
            held = await Pauses(store.rounds).pause(
                owner_id, at=SystemClock().now(), length=duration
            )
            return held.describe(settings.owner.tz)

    until = "then" if duration is not None else "`backthink resume`"
    typer.echo(f"{_run(go())}: every round is skipped until {until}")


@app.command("resume")
def resume_cmd(ctx: typer.Context) -> None:
    """End a pause: rounds run again from the next trigger on."""
    from backthink.host.app import SystemClock
    from backthink.round.pause import Pauses
    from backthink.store import open_database

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())
    owner_id = settings.owner.id

    async def go() -> bool:
        async with open_database(settings.database) as store:
            return (await Pauses(store.rounds).resume(owner_id, at=SystemClock().now())).paused

    typer.echo("resumed: rounds run again" if _run(go()) else "not paused: rounds run as usual")


@app.command("status")
def status_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show whether the daemon runs, the pause, the last round, deliveries, channels and model."""
    from backthink.host.app import SystemClock
    from backthink.host.status import gather

    c: Context = ctx.obj
    settings = c.for_owner(c.settings())
    found = _run(gather(settings, settings.owner.id, at=SystemClock().now()))
    if as_json:
        _print_json(found.to_json())
    else:
        typer.echo(found.render(settings.owner.tz))


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def main() -> None:
    """Entry point: turns backthink errors into one line on stderr and an exit code."""
    debug = "--debug" in sys.argv[1:]
    try:
        app()
    except BackthinkError as exc:
        if debug:
            raise
        typer.echo(f"backthink: {redact_urls(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        # A bug must still read as one line; --debug shows the traceback.
        if debug:
            raise
        typer.echo(
            f"backthink: unexpected error: {type(exc).__name__}: {redact_urls(str(exc))}", err=True
        )
        sys.exit(1)
