"""`backthink check`: validate what a round needs before the daemon meets it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from backthink.config import Settings, WebChannelSettings, WebhookChannelSettings
from backthink.delivery.channels import build_channel
from backthink.endpoint.client import NOT_LISTED, OpenAIModelClient
from backthink.endpoint.local import find_local_servers, ports_to_ask
from backthink.endpoint.probe import ToolSupport, probe_tools
from backthink.errors import BackthinkError, ModelNotConfiguredError
from backthink.host.app import MODEL_MISSING_HINT, AppOverrides, build_app
from backthink.redact import redact_url
from backthink.store import VolatileStores, open_database


class CheckError(BackthinkError):
    """A check found a problem; the message names it."""


State = Literal["ok", "warn", "fail"]
_MARKS = {"ok": "ok ", "warn": "warn", "fail": "FAIL"}  # one width, so the lines align


@dataclass(frozen=True)
class Checked:
    """One check's line, and whether it passed, passed with a warning, or failed."""

    line: str
    state: State = "ok"

    @property
    def warn(self) -> bool:
        """Passed, but something the owner configured will not work as they expect."""
        return self.state == "warn"

    def __str__(self) -> str:
        return f"{_MARKS[self.state]} {self.line}"


async def run_checks(settings: Settings) -> AsyncIterator[Checked]:
    """Run every check that can run, yielding one line each, then raise on the first problem.

    A problem does not stop the checks that do not depend on it: a bad channel
    still lets the prompts, the database and the model be checked, so one run
    names everything to fix. A warning passes: rounds still run, but something
    the owner configured will not work as they expect (an endpoint that ignores
    tools, a model the server does not list, a webhook that posts unsigned).

    Raises:
        CheckError: after the last line, the first problem, naming what is wrong.
    """
    failed: list[str] = []
    for checked in [_check_prompts(settings), *_check_channels(settings)]:
        if checked.state == "fail":
            failed.append(checked.line)
        yield checked
    checked = await _check_database(settings)
    if checked.state == "fail":
        failed.append(checked.line)
    yield checked
    async for checked in _check_model(settings):
        if checked.state == "fail":
            failed.append(checked.line)
        yield checked
    if failed:
        more = f" ({len(failed)} problems; the first)" if len(failed) > 1 else ""
        raise CheckError(f"{failed[0]}{more}")


NOWHERE = (
    "channels: only the session channel, and with [api] on it reaches the owner only while a "
    "client reads GET /v1/events or /v1/messages (a chat app behind the relay does not): "
    "pushes have nowhere to go; add a channel that reaches the owner (docs/api.md shows how "
    "for Open WebUI)"
)


def _check_channels(settings: Settings) -> list[Checked]:
    """Each channel built as a round builds it: one line each, or one line for none.

    With the API on and no channel but the session's, a warning says pushes have
    nowhere to go unless a client watches the session.
    """
    if not settings.channels:
        return [Checked("channels: none configured", "warn")]
    lines = []
    if settings.api.listen and all(
        isinstance(c, WebChannelSettings) for c in settings.channels.values()
    ):
        lines.append(Checked(NOWHERE, "warn"))
    for name, channel in settings.channels.items():
        label = f"channels: {name} ({channel.type})"
        if isinstance(channel, WebChannelSettings):
            lines.append(Checked(label))
            continue
        try:
            build_channel(name, channel)
        except BackthinkError as exc:
            lines.append(Checked(f"{label}: {exc}", "fail"))
            continue
        if isinstance(channel, WebhookChannelSettings) and channel.secret is None:
            unsigned = f"{label}: posts unsigned; set secret so the receiver can verify each push"
            lines.append(Checked(unsigned, "warn"))
        else:
            lines.append(Checked(label))
    return lines


def _check_prompts(settings: Settings) -> Checked:
    """The templates and the persona prompt, loaded as a round loads them."""
    try:
        # Wiring the app in memory loads the templates and the persona prompt exactly
        # as a round will; the channels were checked on their own lines.
        build_app(settings, VolatileStores.empty(), AppOverrides(model=None, channels={}))
    except BackthinkError as exc:
        return Checked(f"prompts: {exc}", "fail")
    folder = settings.prompt.dir or "shipped with the package"
    persona = settings.persona.prompt_file or "shipped default"
    return Checked(f"prompts: {folder} ({settings.prompt.language}); persona: {persona}")


async def _check_database(settings: Settings) -> Checked:
    """The database opens, reads, and takes a round's writes."""
    safe_url = redact_url(settings.database.url)
    try:
        async with open_database(settings.database) as store:
            await store.messages.recent(settings.owner.id, 1)
            # A round writes its record and deliveries: check the way it will.
            await store.rounds.check_writable()
    except BackthinkError as exc:
        return Checked(f"database {safe_url}: {exc}", "fail")
    return Checked(f"database: {safe_url}")


async def _check_model(settings: Settings) -> AsyncIterator[Checked]:
    """The endpoint answers, lists the model, and (when rounds offer tools) uses them."""
    try:
        client = OpenAIModelClient(settings.model)
    except ModelNotConfiguredError:
        yield Checked(f"model: {MODEL_MISSING_HINT}{await _local_hint(None)}", "fail")
        return
    t = settings.tools
    tools_on = t.enabled and t.max_steps > 0 and settings.model.output != "json_schema"
    try:
        async with client:
            detail = await client.probe()
            # Only when rounds offer tools: the probe is one more model call.
            tools = await probe_tools(client) if tools_on else None
    except BackthinkError as exc:
        yield Checked(f"model: {exc}{await _local_hint(settings.model.base_url)}", "fail")
        return
    where = redact_url(settings.model.base_url or "")
    model_state: State = "warn" if NOT_LISTED in detail else "ok"
    yield Checked(f"model: {settings.model.name} at {where} ({detail})", model_state)
    if tools is not None:
        tools_state: State = "ok" if tools.support is ToolSupport.CALLS else "warn"
        yield Checked(f"tools: {tools.detail}", tools_state)


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
