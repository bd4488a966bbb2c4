"""`backthink rounds`: the audit log, newest first."""

from __future__ import annotations

from typing import Annotated

import typer

from backthink.cli.common import OwnerOption, command_context, print_json, run_sync
from backthink.config import Settings
from backthink.records import RoundRecord


def rounds(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many rounds.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    owner: OwnerOption = None,
) -> None:
    """Show the audit log of rounds, newest first."""
    from backthink.round.recorder import Recorder
    from backthink.round.spill import Spill
    from backthink.store import open_database

    c = command_context(ctx, owner)
    settings = c.for_owner(c.settings())

    async def go() -> list[RoundRecord]:
        async with open_database(settings.database, write=False) as store:
            if (spill := settings.database.spill_path) is not None:
                # Rounds another process could not save belong in the log shown.
                await Recorder(store.rounds, spill=Spill(spill)).drain(thorough=True)
            return await store.rounds.list(owner_id=settings.owner.id, limit=limit)

    records = run_sync(go())
    if as_json:
        print_json([r.summary() for r in records])
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
