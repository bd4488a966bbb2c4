"""`backthink check`: validate what a round needs before the daemon meets it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from backthink.config import Settings
from backthink.errors import BackthinkError, ModelNotConfiguredError
from backthink.host.app import MODEL_MISSING_HINT, AppOverrides, build_app
from backthink.model.client import OpenAIModelClient
from backthink.model.local import find_local_servers, ports_to_ask
from backthink.model.probe import ToolSupport, probe_tools
from backthink.redact import redact_url
from backthink.store import VolatileStores, open_database


class CheckError(BackthinkError):
    """A check found a problem; the message names it."""


@dataclass(frozen=True)
class Checked:
    """One check that passed: its line, and whether it passed with a warning."""

    line: str
    warn: bool = False

    def __str__(self) -> str:
        return ("warn " if self.warn else "ok  ") + self.line


async def run_checks(settings: Settings) -> AsyncIterator[Checked]:
    """Run every check in order, yielding one line per check that passed.

    A warning passes: rounds still run, but something the owner configured
    will not work (an endpoint that ignores tools).

    Raises:
        CheckError: the first problem, as one line naming what is wrong.
    """
    try:
        # Wiring the app in memory loads the templates, the persona prompt and
        # every channel, exactly as a round will.
        build_app(settings, VolatileStores.empty(), AppOverrides(model=None))
    except BackthinkError as exc:
        raise CheckError(f"prompts: {exc}") from None
    folder = settings.prompt.dir or "shipped with the package"
    persona = settings.persona.prompt_file or "shipped default"
    yield Checked(f"prompts: {folder} ({settings.prompt.language}); persona: {persona}")

    kinds = ", ".join(f"{name} ({c.type})" for name, c in settings.channels.items())
    yield Checked(f"channels: {kinds or 'none configured'}")

    safe_url = redact_url(settings.database.url)
    try:
        async with open_database(settings.database) as store:
            await store.messages.recent(settings.owner.id, 1)
            # A round writes its record and deliveries: check the way it will.
            await store.rounds.check_writable()
    except BackthinkError as exc:
        raise CheckError(f"database {safe_url}: {exc}") from None
    yield Checked(f"database: {safe_url}")

    try:
        client = OpenAIModelClient(settings.model)
    except ModelNotConfiguredError:
        raise CheckError(f"model: {MODEL_MISSING_HINT}{await _local_hint(None)}") from None
    t = settings.tools
    tools_on = t.enabled and t.max_steps > 0 and settings.model.output != "json_schema"
    try:
        async with client:
            detail = await client.probe()
            # Only when rounds offer tools: the probe is one more model call.
            tools = await probe_tools(client) if tools_on else None
    except BackthinkError as exc:
        raise CheckError(f"model: {exc}{await _local_hint(settings.model.base_url)}") from None
    yield Checked(
        f"model: {settings.model.name} at {redact_url(settings.model.base_url or '')} ({detail})"
    )
    if tools is not None:
        yield Checked(f"tools: {tools.detail}", warn=tools.support is not ToolSupport.CALLS)


async def _local_hint(configured: str | None) -> str:
    """A pointer to a model server running on this machine, when one answers (else "")."""
    found = [
        server
        for server in await find_local_servers(ports_to_ask(os.environ))
        if server.base_url.rstrip("/") != (configured or "").rstrip("/")
    ]
    if not found:
        return ""
    server = found[0]
    model = f", model {server.models[0]!r}" if server.models else ""
    return (
        f"; {server.kind} answers at {server.base_url}{model}"
        " (backthink init --detect writes a config for it)"
    )
