"""`backthink eval`: the companion's judgment scored on scenarios, or two saved runs compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from backthink.cli.common import OwnerOption, command_context, print_json, run_sync
from backthink.errors import InputError


def eval_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(help="Scenarios and days, JSON Lines (e.g. eval/scenarios.jsonl)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=100, help="Runs per scenario.")] = 1,
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--compare",
            metavar="A.json B.json",
            help="Compare two saved --json runs side by side instead of running scenarios.",
        ),
    ] = None,
    owner: OwnerOption = None,
) -> None:
    """Score the companion's judgment on scenarios, in isolation: no database, no channels."""
    if compare is not None:
        if file is not None:
            raise InputError("pass either a scenario file or --compare A.json B.json, not both")
        compare_runs(compare, as_json=as_json)
        return
    if file is None:
        raise InputError("missing the scenario file (or --compare A.json B.json)")
    from backthink.endpoint.client import OpenAIModelClient
    from backthink.evaluation.runner import Evaluation, config_owner_settings, run_eval
    from backthink.evaluation.scenarios import load_scenarios
    from backthink.evaluation.table import render_table

    c = command_context(ctx, owner)
    settings = config_owner_settings(c.settings(), c.owner)
    owner_id = settings.owner.id
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    loaded = load_scenarios(text.splitlines(), source=str(file), owner_tz=settings.owner.tz)
    for problem in loaded.problems:
        typer.echo(f"backthink: {problem}", err=True)
    if not loaded.scenarios and not loaded.days:
        raise InputError(f"{file}: no valid scenario to run")

    async def go() -> Evaluation:
        async with OpenAIModelClient(settings.model, channels=list(settings.channels)) as model:
            return await run_eval(
                settings,
                loaded.scenarios,
                days=loaded.days,
                model=model,
                owner_id=owner_id,
                repeat=repeat,
            )

    evaluation = run_sync(go())
    data = evaluation.to_json(invalid=loaded.problems)
    if as_json:
        print_json(data)
    else:
        typer.echo(render_table(data, evaluation.results, evaluation.days))


def compare_runs(files: tuple[Path, Path], *, as_json: bool) -> None:
    """Print two saved runs side by side with their differences."""
    from backthink.evaluation.compare import compare, load_run, render_compare

    result = compare(load_run(files[0]), load_run(files[1]))
    if as_json:
        print_json(result)
    else:
        typer.echo(render_compare(result, [str(f) for f in files]))
