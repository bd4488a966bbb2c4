"""`backthink think`: one round now, or the exact request it would send."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from backthink.cli.common import OwnerOption, command_context, print_json, run_sync
from backthink.models import Outcome, Reason
from backthink.records import RoundRecord
from backthink.tools.definition_budget import SEARCH_NAME, OfferedTools


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
    owner: OwnerOption = None,
) -> None:
    """Run one round now and record it."""
    from backthink.host.fleet import open_fleet
    from backthink.host.witness import ask_daemon

    c = command_context(ctx, owner)
    settings = c.settings()
    owner_id = c.owner_id(settings)

    async def go() -> RoundRecord | tuple[dict[str, Any], OfferedTools]:
        async with open_fleet(settings) as fleet:
            a = await fleet.app(owner_id)
            if dry_run:
                from backthink.endpoint.body import request_body

                request = await a.thinker.prepare(owner_id, trigger)
                offered = await a.thinker.tool_offer(owner_id)
                body = request_body(
                    settings.model,
                    request.messages,
                    tools=offered.definitions,
                    channels=list(settings.channels),
                )
                return body, offered
            # With the API on, only the running daemon knows whether a chat app watches.
            await ask_daemon(fleet, a, owner_id)
            return await a.thinker.run_round(owner_id, trigger)

    result = run_sync(go())
    if isinstance(result, tuple):
        body, offered = result
        if as_json:
            print_json(body)
        else:
            _print_request(body, offered, has_key=settings.model.api_key is not None)
        return
    record = result
    if as_json:
        summary = record.summary()
        print_json(
            {
                k: summary[k]
                for k in ("round_id", "trigger", "outcome", "reason", "channel", "decision")
            }
        )
    else:
        _print_round(record)
    # A round with no model to think with did not do what was asked, though nothing failed.
    if record.outcome is Outcome.FAILED or record.reason == Reason.NO_MODEL:
        if as_json:
            for note in record.notes:
                typer.echo(f"backthink: {note}", err=True)
        raise typer.Exit(1)


def _print_request(body: dict[str, Any], offered: OfferedTools, *, has_key: bool) -> None:
    """Print a chat-completions request as the endpoint receives it, the key redacted.

    Before the tools, one line says how much of `tools.max_chars` they take, and
    which tools wait behind tool_search (offered once a search finds them).
    """
    typer.echo("POST /chat/completions")
    typer.echo(f"Authorization: Bearer {'<redacted>' if has_key else '(no key)'}")
    typer.echo(f"model: {body['model']}")
    typer.echo(f"max_tokens: {body['max_tokens']}")
    if "response_format" in body:
        schema = body["response_format"]["json_schema"]
        typer.echo(f"response_format: json_schema {schema['name']} (strict)")
    tools = body.get("tools", [])
    if tools:
        typer.echo(
            f"tools: {len(tools)} offered in full, {offered.chars} of "
            f"tools.max_chars = {offered.max_chars} characters"
        )
    if offered.held:
        typer.echo(f"behind {SEARCH_NAME}: {len(offered.held)}: {', '.join(offered.held)}")
    for tool in tools:
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
