"""Owners: who the companion serves, and each owner's settings over the global ones.

The config file names owners in `[owner]` (the one-owner shorthand) and in
`[owners.ID]` sections; `backthink owners` manages more in the database. An
owner's settings are the global settings with what the owner sets laid over
them: its time zone, name and language, its persona prompt file and state
file, any `[gate]` key, and any channel's keys (a webhook `url`, an apprise
target) or a channel of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from backthink.config.channels import ChannelSettings
from backthink.config.sections import (
    GateSettings,
    OwnerEntry,
    OwnerSettings,
    PersonaSettings,
    PromptSettings,
    StateSettings,
)
from backthink.config.settings import Settings
from backthink.errors import ConfigError, InputError
from backthink.models import Owner

T = TypeVar("T", bound=BaseModel)
_CHANNEL: TypeAdapter[ChannelSettings] = TypeAdapter(ChannelSettings)
SETTABLE = ("name", "timezone", "language", "persona", "state_file", "enabled")
"""The keys `owners set` takes besides `gate.KEY` and `channels.NAME.KEY`."""


def _entry_owner(owner_id: str, entry: OwnerEntry) -> Owner:
    return Owner(
        id=owner_id,
        name=entry.name,
        timezone=entry.timezone,
        language=entry.language,
        persona=None if entry.persona is None else str(entry.persona),
        state_file=None if entry.state_file is None else str(entry.state_file),
        channels=entry.channels,
        gate=entry.gate,
        enabled=entry.enabled,
        source="config",
    )


def config_owners(settings: Settings) -> list[Owner]:
    """The owners the config file names: `[owner]` (when given, or alone) and `[owners.ID]`.

    `[owner]` without `[owners.*]` is the one owner, even when left out (the
    built-in default owner); beside them it is one more owner only when the
    file (or the environment) sets it.
    """
    owners = [_entry_owner(owner_id, entry) for owner_id, entry in settings.owners.items()]
    if not owners or "owner" in settings.model_fields_set:
        o = settings.owner
        if o.id not in settings.owners:
            owners.insert(0, Owner(id=o.id, name=o.name, timezone=o.timezone, source="config"))
    return owners


def owner_settings(settings: Settings, owner: Owner) -> Settings:
    """The settings of one owner's rounds: the global settings with the owner's laid over.

    Raises:
        ConfigError: one line naming the owner and the key whose value cannot work.
    """
    try:
        return _overlay(settings, owner)
    except ConfigError as exc:
        raise ConfigError(f"owner {owner.id!r}: {exc}") from None


def _section(name: str, model: type[T], values: Mapping[str, Any]) -> T:
    """Validate one settings section, naming `name.key` in the error."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join([name, *(str(part) for part in err["loc"])])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        raise ConfigError(f"{key}: {message}") from None


def _overlay(settings: Settings, owner: Owner) -> Settings:
    update: dict[str, Any] = {
        "owner": _section(
            "owner", OwnerSettings, {"id": owner.id, "name": owner.name, "timezone": owner.timezone}
        ),
    }
    if owner.language is not None:
        update["prompt"] = _section(
            "prompt", PromptSettings, {**dict(settings.prompt), "language": owner.language}
        )
    if owner.persona is not None:
        update["persona"] = _section(
            "persona", PersonaSettings, {**dict(settings.persona), "prompt_file": owner.persona}
        )
    if owner.state_file is not None:
        update["state"] = _section(
            "state", StateSettings, {**dict(settings.state), "file": owner.state_file}
        )
    if owner.gate:
        update["gate"] = _section("gate", GateSettings, {**dict(settings.gate), **owner.gate})
    if owner.channels:
        update["channels"] = _channels(settings.channels, owner.channels)
    return settings.model_copy(update=update)


def _channels(
    base: Mapping[str, ChannelSettings], overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, ChannelSettings]:
    channels = dict(base)
    for name, keys in overrides.items():
        current = channels.get(name)
        if current is None and "type" not in keys:
            raise ConfigError(
                f"channels.{name}: no such channel; a channel of the owner's own needs a type"
            )
        merged = {**(dict(current) if current is not None else {}), **keys}
        try:
            channels[name] = _CHANNEL.validate_python(merged)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = ".".join(str(part) for part in err["loc"][1:]) or "type"
            message = str(err["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"channels.{name}.{key}: {message}") from None
    return channels


def set_key(owner: Owner, key: str, value: str) -> Owner:
    """The owner with one key set from its text, as `owners set ID KEY VALUE` gives it.

    An empty VALUE unsets an optional key (`language`, `persona`, `state_file`,
    a `gate.KEY` or a `channels.NAME.KEY`), which then falls back to the
    global value.

    Raises:
        InputError: the key is not one an owner has, or the value is not valid for it.
    """
    parts = key.split(".")
    if parts[0] in SETTABLE and len(parts) == 1:
        field = parts[0]
        new: Any = value
        if field == "enabled":
            new = _boolean(value, key)
        elif field in {"language", "persona", "state_file"} and value == "":
            new = None
        try:
            return Owner.model_validate({**dict(owner), field: new})
        except ValidationError as exc:
            message = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
            raise InputError(f"{key}: {message}") from None
    if parts[0] == "gate" and len(parts) == 2:
        gate = dict(owner.gate)
        if value == "":
            gate.pop(parts[1], None)
        else:
            gate[parts[1]] = _scalar(value)
        return owner.model_copy(update={"gate": gate})
    if parts[0] == "channels" and len(parts) == 3:
        channels = {name: dict(keys) for name, keys in owner.channels.items()}
        keys = channels.setdefault(parts[1], {})
        if value == "":
            keys.pop(parts[2], None)
        else:
            keys[parts[2]] = value
        if not keys:
            del channels[parts[1]]
        return owner.model_copy(update={"channels": channels})
    known = ", ".join([*SETTABLE, "gate.KEY", "channels.NAME.KEY"])
    raise InputError(f"unknown owner key {key!r} (one of {known})")


def _boolean(value: str, key: str) -> bool:
    text = value.strip().lower()
    if text in {"true", "yes", "on", "1"}:
        return True
    if text in {"false", "no", "off", "0"}:
        return False
    raise InputError(f"{key}: {value!r} is not true or false")


def _scalar(value: str) -> Any:
    """A gate value from the command line: an integer, true/false, or the text itself."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if text.lower() in {"true", "false"}:
        return text.lower() == "true"
    return text


def redacted(owner: Owner) -> dict[str, Any]:
    """The owner as `owners list --json` shows it, with channel addresses and secrets hidden.

    An apprise URL is a credential from end to end, a webhook path often one
    too: only the scheme (and an http host) is shown.
    """
    channels: dict[str, dict[str, Any]] = {}
    for name, keys in owner.channels.items():
        channels[name] = {
            key: _hidden(value) if key in {"url", "secret"} else value
            for key, value in keys.items()
        }
    return {**owner.model_dump(mode="json"), "channels": channels}


def _hidden(value: Any) -> str:
    text = str(value)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return "***"
    if scheme.lower() in {"http", "https"}:
        host = rest.split("/", 1)[0].rpartition("@")[2]
        return f"{scheme}://{host}/***"
    return f"{scheme}://***"
