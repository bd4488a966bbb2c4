"""The setup commands of the command line: `backthink init` and `backthink service ...`.

They parse, ask and print; what they write and run lives in `starter.py` and
`service.py`. Kept beside `cli.py` so the command line stays one concept a module.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from backthink.cli.common import Context, run_sync
from backthink.config import paths
from backthink.errors import BackthinkError, InputError
from backthink.models import Language

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from backthink.host.status import Status

service_app = typer.Typer(
    help="Install, remove or inspect backthink's systemd service.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_UserFlag = Annotated[bool, typer.Option("--user", help="A user service (default unless root).")]
_SystemFlag = Annotated[bool, typer.Option("--system", help="The system service (needs root).")]
_DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the unit and the commands; change nothing.")
]


def init_cmd(
    ctx: typer.Context,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path", help="Where to write (default: ~/.config/backthink/backthink.toml)."
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="The OpenAI-compatible endpoint.")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="The model name.")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api-key-env", metavar="NAME", help="Read the key from this variable."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", help="The key itself: kept in backthink.env (mode 0600)."),
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="The owner's IANA time zone.")
    ] = None,
    language: Annotated[
        str | None, typer.Option("--language", help="zh or en: the prompts' language.")
    ] = None,
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Ask nothing; flags and defaults only.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing config.")] = False,
    detect: Annotated[
        bool,
        typer.Option(
            "--detect", help="Look for a model server on this machine and use the first found."
        ),
    ] = False,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="Folder of the database, state file and socket "
            "(default: the user's state folder, or NAME-data beside a config elsewhere).",
        ),
    ] = None,
) -> None:
    """Write a starter config, then check it and print the next command."""
    from backthink.config import starter

    env = os.environ
    if api_key is not None and api_key_env is not None:
        raise InputError("give --api-key or --api-key-env, not both")
    if language is not None and language not in ("zh", "en"):
        raise InputError(f"--language: {language!r} is not zh or en")
    target = (path or ctx.obj.config or paths.user_config_path(env)).absolute()
    if target.exists() and not force:
        raise InputError(f"{target} exists: pass --force to overwrite it")
    ask = not non_interactive and sys.stdin.isatty()
    suggested_url, suggested_model = starter.DEFAULT_BASE_URL, starter.DEFAULT_MODEL
    if detect or (ask and base_url is None):
        local = _local_servers()
        if local:
            suggested_url = local[0].base_url
            suggested_model = local[0].models[0] if local[0].models else suggested_model
            if not ask:
                base_url = base_url or suggested_url
                model = model or suggested_model
        elif detect:
            typer.echo("no model server answered on this machine's usual ports", err=True)
    if ask:
        typer.echo(f"Writing {target}. Press Enter to keep the suggestion in brackets.")
        base_url = base_url or typer.prompt("Model endpoint", default=suggested_url)
        model = model or typer.prompt("Model name", default=suggested_model)
        if api_key is None and api_key_env is None:
            entered = typer.prompt(
                "API key (kept in backthink.env, mode 0600; empty: read $OPENAI_API_KEY)",
                default="",
                hide_input=True,
                show_default=False,
            )
            api_key = entered or None
        timezone = timezone or typer.prompt("Time zone", default=starter.local_timezone())
        language = language or typer.prompt(
            "Language of the prompts (zh or en)", default=starter.local_language(env)
        )
        if language not in ("zh", "en"):
            raise InputError(f"language: {language!r} is not zh or en")
    lang: Language = "zh" if (language or starter.local_language(env)) == "zh" else "en"
    answers = starter.Answers(
        base_url=base_url,
        model=model or starter.DEFAULT_MODEL,
        timezone=timezone or starter.local_timezone(),
        language=lang,
        api_key=api_key,
        api_key_env=api_key_env,
    )
    written = starter.write_starter(target, answers, force=force, env=env, data=data)
    typer.echo(f"wrote {written.config}")
    if written.env_file is not None:
        typer.echo(f"wrote {written.env_file} (mode 0600): the key")
    typer.echo(f"data goes to {written.data_dir}")
    found = paths.find_config(None, env, system=paths.SYSTEM_CONFIG)
    config_flag = "" if found == written.config else f"--config {written.config} "
    if found is not None and found != written.config:
        # Inside a checkout its own config/backthink.toml comes first: say why the flag is there.
        typer.echo(f"note: here backthink reads {found} first; --config names the new file")
    scope = "--system" if starter.is_system_path(written.config) else "--user"
    problem = _check(written.config)
    if problem is not None:
        typer.echo(f"backthink: {problem}", err=True)
        typer.echo(f"fix it in {written.config}, then run: backthink {config_flag}check")
        raise typer.Exit(1)
    typer.echo(f"next: backthink {config_flag}service install {scope}")


def _local_servers() -> list[Any]:
    """The model servers answering on this machine's usual ports, each said in one line."""
    from backthink.endpoint.local import find_local_servers, ports_to_ask

    found = asyncio.run(find_local_servers(ports_to_ask(os.environ)))
    for server in found:
        models = ", ".join(server.models) or "no models listed"
        typer.echo(f"found {server.kind} at {server.base_url}: {models}")
    return found


def _check(config: Path) -> str | None:
    """Run `backthink check` on the new config, printing each line; the problem, if any."""
    from backthink.config import load_settings
    from backthink.host.checks import run_checks

    async def go() -> None:
        async for line in run_checks(load_settings(config)):
            typer.echo(str(line))

    try:
        typer.echo(f"ok  config: {config}")
        asyncio.run(go())
    except BackthinkError as exc:
        return str(exc)
    return None


def _scope(user: bool, system: bool) -> Any:
    from backthink.host.unit import default_scope

    if user and system:
        raise InputError("give --user or --system, not both")
    return "user" if user else "system" if system else default_scope()


def _config_path(ctx: typer.Context) -> Path:
    c: Context = ctx.obj
    found = c.config_file()
    if found is None or not found.is_file():
        raise InputError(
            f"no config file{f' at {found}' if found else ''}: write one with `backthink init`"
        )
    return found


@service_app.command("install")
def service_install(
    ctx: typer.Context,
    user: _UserFlag = False,
    system: _SystemFlag = False,
    dry_run: _DryRun = False,
) -> None:
    """Write the unit, reload systemd, enable and start the service."""
    from backthink.host import unit as service

    scope = _scope(user, system)
    config = _config_path(ctx)
    ctx.obj.settings()  # a config that does not load would only fail inside the unit
    # In a dry run every line that is not the unit is a comment, so the unit can be saved as is.
    typer.echo(f"{'# ' if dry_run else ''}config: {config}")
    plan = service.plan_install(scope, config, os.environ)
    linger = ["loginctl", "enable-linger", service.user_name(os.environ)]
    if dry_run or not service.has_systemd():
        typer.echo(f"# {plan.unit_path}")
        typer.echo(plan.unit_text, nl=False)
        typer.echo("# end of unit")
    if not service.has_systemd():
        typer.echo(
            "backthink: systemctl not found: this host does not run systemd, so nothing "
            f"{'would be' if dry_run else 'was'} installed; save the unit above as "
            f"{plan.unit_path} on a systemd host, or start "
            f"`{' '.join(service.program())} --config {config} run` from your own init system",
            err=True,
        )
        raise typer.Exit(0 if dry_run else 1)
    if dry_run:
        typer.echo("# would run:")
        for argv in plan.commands:
            typer.echo(" ".join(argv))
        if scope == "user":
            typer.echo(
                f"{' '.join(linger)}  # only when lingering is off: without it the service "
                "stops at logout and does not start at boot"
            )
        return
    if scope == "system" and os.geteuid() != 0:
        raise InputError("service install --system needs root: run it with sudo")
    try:
        done = service.install(plan)
    except service.ServiceError as exc:
        foreground = f"{' '.join(service.program())} --config {config} run"
        raise service.ServiceError(
            f"{exc}; run it in the foreground instead: {foreground}"
        ) from None
    for line in done:
        typer.echo(line)
    if scope == "user":
        typer.echo(service.enable_linger(linger[-1]))
    journal = (
        "journalctl --user -u backthink -f" if scope == "user" else "journalctl -u backthink -f"
    )
    typer.echo(f"installed: see it with `backthink service status` and `{journal}`")


@service_app.command("uninstall")
def service_uninstall(
    ctx: typer.Context, user: _UserFlag = False, system: _SystemFlag = False
) -> None:
    """Stop and disable the service and remove its unit (the config and data stay)."""
    from backthink.host import unit as service

    scope = _scope(user, system)
    for line in service.uninstall(scope, os.environ):
        typer.echo(line)


@service_app.command("status")
def service_status(
    ctx: typer.Context,
    user: _UserFlag = False,
    system: _SystemFlag = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show whether the unit is installed and active, and the daemon's own status."""
    from backthink.host import unit as service

    scope = _scope(user, system) if user or system else service.installed_scope(os.environ)
    path = service.unit_path(scope, os.environ)
    installed, active = path.is_file(), service.is_active(scope)
    found, problem = _daemon_status(ctx)
    if as_json:
        doc = {
            "installed": installed,
            "active": active,
            "unit_path": str(path),
            "scope": scope,
            "daemon": None if found is None else found[0].to_json(),
        }
        typer.echo(json.dumps(doc, ensure_ascii=False, default=str))
        return
    typer.echo(f"unit     {path} ({'installed' if installed else 'not installed'}, {scope})")
    typer.echo(f"service  {'active' if active else 'not active'}")
    if found is None:
        typer.echo(f"daemon   unknown: {problem}")
        return
    status, tz = found
    typer.echo(status.render(tz))


def _daemon_status(ctx: typer.Context) -> tuple[tuple[Status, ZoneInfo] | None, str]:
    """What `backthink status` finds for the config in use, or None and why not."""
    from backthink.clock import SystemClock
    from backthink.host.status import gather

    try:
        settings = ctx.obj.settings()
        found = asyncio.run(gather(settings, ctx.obj.owner_id(settings), at=SystemClock().now()))
    except BackthinkError as exc:
        return None, str(exc)
    return (found, settings.owner.tz), ""


def check(ctx: typer.Context) -> None:
    """Validate config, prompts, database and model endpoint; exit 1 on the first problem."""
    from backthink.host.checks import run_checks

    c: Context = ctx.obj
    where = c.config_file()
    settings = c.settings()
    typer.echo(f"ok  config: {where or 'built-in defaults'}")

    async def go() -> None:
        async for line in run_checks(settings):
            typer.echo(str(line))

    run_sync(go())
