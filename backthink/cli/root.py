"""The `backthink` command line's root: global options, the command groups, the entry point."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

import backthink.cli.evaluate as evaluate
import backthink.cli.memory as memory
import backthink.cli.messages as messages
import backthink.cli.process as process
import backthink.cli.rounds as rounds
import backthink.cli.think as think
from backthink.cli.common import Context
from backthink.cli.owners import owners_app
from backthink.cli.setup import check, init_cmd, service_app
from backthink.errors import BackthinkError
from backthink.host import logs
from backthink.redact import redact_urls

app = typer.Typer(
    name="backthink",
    help="A proactive-companion daemon: heartbeat rounds, a push gate, one channel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: switches read as `--dry-run`, not `--dry-run <bool>`.
    rich_markup_mode=None,
)
# The order here is the order of `backthink --help`.
app.command("run")(process.run)
app.command("worker")(process.worker)
app.command("think")(think.think)
app.add_typer(messages.messages_app, name="messages")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(owners_app, name="owners")
app.command("init")(init_cmd)
app.add_typer(service_app, name="service")
app.command("rounds")(rounds.rounds)
app.command("eval")(evaluate.eval_cmd)
app.command("check")(check)
app.command("poke")(process.poke_cmd)
app.command("pause")(process.pause_cmd)
app.command("resume")(process.resume_cmd)
app.command("status")(process.status_cmd)


def _print_version(value: bool) -> None:
    """`--version`: the installed distribution's version, then exit 0."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"backthink {version('backthink')}")
        except PackageNotFoundError:
            typer.echo("backthink (not installed: version unknown)")
        raise typer.Exit()


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
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """backthink: gives an AI companion a life between conversations."""
    ctx.obj = Context(config=config, owner=owner, debug=debug)
    # One-shot commands print their own result; their log shows only warnings and errors.
    logs.configure(stream=sys.stderr, level="debug" if debug else "warning")


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
