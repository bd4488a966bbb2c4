"""`backthink eval`: the companion's judgment scored on scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from backthink.cli.common import OwnerOption, command_context, print_json, run_sync
from backthink.errors import InputError


def eval_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="Scenarios, JSON Lines (e.g. eval/scenarios.jsonl).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=100, help="Runs per scenario.")] = 1,
    owner: OwnerOption = None,
) -> None:
    """Score the companion's judgment on scenarios, in isolation: no database, no channels."""
    from backthink.evaluation.figures import render_table
    from backthink.evaluation.runner import Evaluation, config_owner_settings, run_eval
    from backthink.evaluation.scenarios import load_scenarios
    from backthink.model.client import OpenAIModelClient

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
    if not loaded.scenarios:
        raise InputError(f"{file}: no valid scenario to run")

    async def go() -> Evaluation:
        async with OpenAIModelClient(settings.model, channels=list(settings.channels)) as model:
            return await run_eval(
                settings, loaded.scenarios, model=model, owner_id=owner_id, repeat=repeat
            )

    evaluation = run_sync(go())
    data = evaluation.to_json(invalid=loaded.problems)
    if as_json:
        print_json(data)
    else:
        typer.echo(render_table(data, evaluation.results))
