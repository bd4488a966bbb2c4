"""Settings: a TOML file, environment overrides, validated into frozen pydantic models.

Precedence, highest first: `BACKTHINK_<SECTION>__<KEY>` environment variables,
the same variables in `backthink.env` beside the config file, the TOML file,
built-in defaults. The variable `model.api_key_env` names (`OPENAI_API_KEY`), from
the environment or that file, fills `model.api_key` when nothing else sets it.
Where the file is looked for and how its paths resolve: `backthink.paths`.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from backthink import paths
from backthink.errors import ConfigError
from backthink.redact import redact_url

CONFIG_ENV = "BACKTHINK_CONFIG"

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta:
    """Parse "90s", "30m", "2h", "1h30m", "1d" or a number of seconds into a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError("expected a duration such as '30m', '2h' or '90s'")
    text = value.strip().lower().replace(" ", "")
    if text.replace(".", "", 1).isdigit():
        return timedelta(seconds=float(text))
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{value!r} is not a duration such as '30m', '2h' or '90s'")
    return timedelta(seconds=total)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class QuietHours(BaseModel):
    """A daily range of local wall-clock time, e.g. 23:00-07:00 (may cross midnight)."""

    model_config = ConfigDict(frozen=True)

    start: time
    end: time

    @classmethod
    def parse(cls, value: Any) -> QuietHours | None:
        """Parse "HH:MM-HH:MM"; an empty string or "off" disables quiet hours."""
        if value is None or isinstance(value, QuietHours):
            return value
        if isinstance(value, dict):
            return cls.model_validate(value)
        text = str(value).strip()
        if text.lower() in {"", "off", "none"}:
            return None
        match = re.fullmatch(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})", text)
        if not match:
            raise ValueError(f"{value!r} is not a range such as '23:00-07:00'")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        try:
            start, end = time(h1, m1), time(h2, m2)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        if start == end:
            raise ValueError(f"{value!r} is empty: start and end are the same time")
        return cls(start=start, end=end)

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


def known_zone(value: str) -> str:
    """Check an IANA time zone name.

    Raises:
        ValueError: no such zone.
    """
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}") from None
    return value


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OwnerSettings(_Section):
    """Who the companion serves."""

    id: str = Field(default="default", min_length=1)
    name: str = ""
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return known_zone(value)

    @property
    def tz(self) -> ZoneInfo:
        """The owner's time zone."""
        return ZoneInfo(self.timezone)


class OwnerEntry(_Section):
    """One `[owners.ID]` section: an owner and what differs from the global settings.

    `language`, `persona` (a persona prompt file), `state_file` and each
    `gate` key default to the global values; `channels.NAME` holds the keys
    that differ for this owner, or a whole channel of its own (with `type`).
    """

    name: str = ""
    timezone: str = "UTC"
    language: Literal["zh", "en"] | None = None
    persona: Path | None = None
    state_file: Path | None = None
    enabled: bool = True
    gate: dict[str, Any] = Field(default_factory=dict)
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return known_zone(value)


class PersonaSettings(_Section):
    """The persona that thinks and speaks."""

    id: str = Field(default="companion", min_length=1)
    name: str = ""
    # None ("") means the default persona shipped inside the package, in the prompt language.
    prompt_file: Path | None = None

    @field_validator("prompt_file", mode="before")
    @classmethod
    def _empty_is_shipped(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


class ModelSettings(_Section):
    """The OpenAI-compatible endpoint used for the one model round."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    # The environment variable (or line of backthink.env) that holds the key when api_key is unset.
    api_key_env: str = Field(default="OPENAI_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    name: str = Field(default="gpt-4o-mini", min_length=1)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_retries: int = Field(default=2, ge=0, le=10)
    max_tokens: int = Field(default=400, ge=16, le=32768)
    # Whether owners' images are sent: "auto" sends them until the endpoint refuses
    # image input, then sends a text placeholder for the life of the process.
    vision: Literal["auto"] | bool = "auto"
    # How the model writes its decision: the footer protocol (the default), or one
    # JSON object the endpoint constrains with a response_format schema.
    output: Literal["footer", "json_schema"] = "footer"

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{redact_url(value)!r} is not an http(s) URL")
        return value.strip()


class DatabaseSettings(_Section):
    """Where messages and rounds live."""

    url: str = "sqlite+aiosqlite:///var/backthink.db"
    busy_timeout: Duration = timedelta(seconds=5)
    # Round records the database refused wait here; None ("") means beside a SQLite file.
    spill_file: Path | None = None

    @field_validator("spill_file", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        return None if value == "" else value

    @property
    def busy_timeout_ms(self) -> int:
        """The SQLite busy timeout in milliseconds."""
        return int(self.busy_timeout.total_seconds() * 1000)

    @property
    def spill_path(self) -> Path | None:
        """Where refused round records wait: `spill_file`, else beside a SQLite file.

        None for an in-memory database with no `spill_file`: nothing outlives it anyway.
        """
        if self.spill_file is not None:
            return self.spill_file
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        from backthink.store.engine import sqlite_path

        try:
            path = sqlite_path(make_url(self.url))
        except ArgumentError:
            return None
        return None if path is None else path.with_name(path.name + ".spill.jsonl")


class ScheduleSettings(_Section):
    """When the daemon thinks."""

    heartbeat: Duration = timedelta(minutes=30)
    jitter: Duration = timedelta(minutes=2)
    quiet_heartbeat: Duration = timedelta(hours=2)
    startup_greeting: bool = True
    startup_cooldown: Duration = timedelta(hours=1)
    cron: list[str] = Field(default_factory=list)

    @field_validator("cron")
    @classmethod
    def _crontab(cls, value: list[str]) -> list[str]:
        from apscheduler.triggers.cron import CronTrigger  # imported only when cron is set

        for expr in value:
            try:
                CronTrigger.from_crontab(expr)
            except ValueError as exc:
                raise ValueError(f"{expr!r} is not a crontab expression: {exc}") from None
        return value

    @field_validator("heartbeat", "quiet_heartbeat")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value


class GateSettings(_Section):
    """The push gate: when a decided push may really reach the owner."""

    quiet_hours: Annotated[QuietHours | None, BeforeValidator(QuietHours.parse)] = QuietHours(
        start=time(23, 0), end=time(7, 0)
    )
    quiet_mode: Literal["critical_only", "skip"] = "critical_only"
    activity_window: Duration = timedelta(minutes=10)
    min_interval: Duration = timedelta(hours=2)
    daily_cap: int = Field(default=4, ge=0)
    max_unanswered: int = Field(default=2, ge=0)
    max_body_chars: int = Field(default=600, ge=1)
    duplicate_window: Duration = timedelta(hours=24)
    default_channel: str | None = None
    channel_cooldown: Duration = timedelta(minutes=10)


class PromptSettings(_Section):
    """Prompt language, template folder and context size."""

    language: Literal["zh", "en"] = "zh"
    recent_messages: int = Field(default=20, ge=0, le=500)
    # characters: the text of the whole request (persona, history, instruction prompt)
    max_chars: int = Field(default=48_000, ge=2_000, le=10_000_000)
    # characters: one message's text past this is cut, with a visible marker
    message_chars: int = Field(default=4_000, ge=100, le=1_000_000)
    # None ("") means the templates shipped inside the package.
    dir: Path | None = None

    @field_validator("dir", mode="before")
    @classmethod
    def _empty_is_shipped(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


class StateSettings(_Section):
    """Where the owner's current state comes from."""

    # "" means no state file: the state is unknown every round, and no round notes it.
    file: Path | None = Path("var/state.json")
    max_age: Duration = timedelta(hours=6)
    # bytes: a larger file counts as unknown and is never read whole
    max_bytes: int = Field(default=65_536, ge=256, le=64 * 1024 * 1024)

    @field_validator("file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


class MemorySettings(_Section):
    """Long-term memory: the journal of thoughts and recall, and their size in the request."""

    enabled: bool = True
    journal: int = Field(default=5, ge=0, le=100)
    recall: int = Field(default=5, ge=0, le=100)
    # characters: the journal and the recalled items together
    max_chars: int = Field(default=1_200, ge=0, le=100_000)
    # characters: a round's thought is cut past this before it is kept
    thought_chars: int = Field(default=400, ge=0, le=100_000)


_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,23}")
_OWNER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")


class McpServerSettings(_Section):
    """One MCP server whose tools a round may call: a command (stdio) or a URL (streamable HTTP)."""

    command: list[str] = Field(default_factory=list)
    url: str | None = None
    # Only these of the server's tools are offered (their names as the server gives them).
    allow: list[str] | None = None
    # Extra environment for a command's process, over a safe default set.
    env: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{redact_url(value)!r} is not an http(s) URL")
        return value

    def model_post_init(self, context: Any, /) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError('give exactly one of command = [...] (stdio) or url = "..."')


class ToolsSettings(_Section):
    """Tools a round may call before it writes its footer, and the bounds of that loop."""

    enabled: bool = True
    max_steps: int = Field(default=4, ge=0, le=32)
    max_calls: int = Field(default=8, ge=0, le=128)
    timeout: Duration = timedelta(seconds=10)
    # characters of one tool result the model sees; the rest is cut out of its middle
    max_result_chars: int = Field(default=2_000, ge=100, le=100_000)
    mcp: dict[str, McpServerSettings] = Field(default_factory=dict)

    @field_validator("mcp")
    @classmethod
    def _server_names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not _SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r}: use letters, digits and '-' (at most 24), "
                    "since it prefixes tool names as NAME__tool"
                )
        return value


class DaemonSettings(_Section):
    """How the running daemon is reached and stopped."""

    socket: Path = Path("var/backthink.sock")
    drain_timeout: Duration = timedelta(seconds=30)
    max_concurrent_rounds: int = Field(default=64, ge=1, le=10_000)


class WorkerSettings(_Section):
    """`backthink worker`: rounds from the queue on PostgreSQL."""

    # rounds one worker runs at once; most of a round is waiting for the model
    concurrency: int = Field(default=32, ge=1, le=10_000)


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class WebSettings(_Section):
    """The daemon's own page: off unless `listen` names an address."""

    listen: str = ""
    token: SecretStr | None = None

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        value = value.strip()
        if value:
            split_listen(value)
        return value

    @property
    def address(self) -> tuple[str, int] | None:
        """The (host, port) to listen on, or None when the page is off."""
        return split_listen(self.listen) if self.listen else None

    @property
    def secret(self) -> str | None:
        """The token, or None when none is set (an empty string is none)."""
        token = self.token.get_secret_value() if self.token is not None else ""
        return token or None

    def check_serving(self) -> None:
        """Refuse a page on a non-loopback address without a token.

        Raises:
            ConfigError: `listen` is not a loopback address and no `token` is set.
        """
        address = self.address
        if address is not None and address[0] not in LOOPBACK_HOSTS and self.secret is None:
            raise ConfigError(
                f"web.listen {self.listen!r} is not a loopback address: set web.token "
                "(anyone who can reach the address could read and pause the companion)"
            )


def split_listen(value: str) -> tuple[str, int]:
    """Split "127.0.0.1:8765" or "[::1]:8765" into host and port.

    Raises:
        ValueError: not HOST:PORT with a port from 1 to 65535.
    """
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # Port 0 takes any free port (tests); the daemon logs the one it got in web.ready.
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT such as '127.0.0.1:8765'")
    return host, int(port)


class WebChannelSettings(_Section):
    """The main session itself: the message waits there for the web UI."""

    type: Literal["web"] = "web"


class WebhookChannelSettings(_Section):
    """A JSON POST to a URL, signed with HMAC-SHA256 when a secret is set."""

    type: Literal["webhook"]
    url: str
    secret: SecretStr | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{redact_url(value)!r} is not an http(s) URL")
        return value


class AppriseChannelSettings(_Section):
    """Any apprise URL (tgram://, discord://, ntfy://, mailto://, ...); it holds tokens."""

    type: Literal["apprise"]
    url: SecretStr


ChannelSettings = Annotated[
    WebChannelSettings | WebhookChannelSettings | AppriseChannelSettings,
    Field(discriminator="type"),
]


def _default_channels() -> dict[str, ChannelSettings]:
    return {"web": WebChannelSettings()}


class Settings(BaseSettings):
    """All of backthink's configuration, frozen once loaded."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="BACKTHINK_",
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
    )

    owner: OwnerSettings = OwnerSettings()
    persona: PersonaSettings = PersonaSettings()
    model: ModelSettings = ModelSettings()
    database: DatabaseSettings = DatabaseSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    gate: GateSettings = GateSettings()
    prompt: PromptSettings = PromptSettings()
    state: StateSettings = StateSettings()
    daemon: DaemonSettings = DaemonSettings()
    memory: MemorySettings = MemorySettings()
    tools: ToolsSettings = ToolsSettings()
    web: WebSettings = WebSettings()
    worker: WorkerSettings = WorkerSettings()
    channels: dict[str, ChannelSettings] = Field(default_factory=_default_channels)
    owners: dict[str, OwnerEntry] = Field(default_factory=dict)

    @field_validator("owners")
    @classmethod
    def _owner_ids(cls, value: dict[str, OwnerEntry]) -> dict[str, OwnerEntry]:
        for owner_id in value:
            if not _OWNER_ID.fullmatch(owner_id):
                raise ValueError(
                    f"owner id {owner_id!r}: use letters, digits, '.', '_', '-' and '@' "
                    "(at most 200)"
                )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file arrives as init arguments; the environment must win over it.
        return (env_settings, init_settings)


def resolve_config_path(path: Path | None, env: Mapping[str, str]) -> Path | None:
    """Pick the config file (absolute): explicit path, $BACKTHINK_CONFIG, then the search order."""
    return paths.find_config(path, env, system=paths.SYSTEM_CONFIG)


def load_settings(path: Path | None = None) -> Settings:
    """Load, merge and validate the configuration (the file, then the process environment).

    Relative paths in the file are relative to its folder; data the file does not
    place (database, state file, socket) goes to the state folder (`paths.data_dir`).

    Raises:
        ConfigError: one line naming the file, the key and what is wrong.
    """
    env = os.environ
    config_path = resolve_config_path(path, env)
    data: dict[str, Any] = {}
    file_env: dict[str, str] = {}
    where = "built-in defaults"
    if config_path is not None:
        where = str(config_path)
        try:
            data = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {config_path} does not exist") from None
        except OSError as exc:
            raise ConfigError(f"config file {config_path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {config_path} is not valid TOML: {exc}") from None
        paths.anchor_paths(data, config_path.parent)
        file_env = _read_env_file(config_path.with_name(paths.ENV_FILE_NAME))
    _place_data(data, paths.data_dir(env))
    overrides = _env_overrides(env)
    from_file = _apply_env_file(data, file_env, env)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        loc, problem = _first_problem(exc)
        blamed = next((name for name, path in overrides.items() if _comes_from(path, loc)), None)
        in_file = next((name for name, path in from_file.items() if _comes_from(path, loc)), None)
        source = where
        if blamed is not None:
            source = f"environment {blamed}"
        elif in_file is not None and config_path is not None:
            source = f"{config_path.with_name(paths.ENV_FILE_NAME)} {in_file}"
        raise ConfigError(f"{source}: {problem}") from None
    key_name = settings.model.api_key_env
    key = env.get(key_name) or file_env.get(key_name)
    if settings.model.api_key is None and key:
        model = settings.model.model_copy(update={"api_key": SecretStr(key)})
        settings = settings.model_copy(update={"model": model})
    if settings.owners:
        from backthink.owners import config_owners, owner_settings

        for owner in config_owners(settings):
            try:
                owner_settings(settings, owner)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    return settings


def _read_env_file(path: Path) -> dict[str, str]:
    try:
        return paths.read_env_file(path)
    except OSError as exc:
        # The system unit's env file is root's alone: a command run by another user
        # goes on without it, as the daemon's own user does.
        import structlog

        structlog.get_logger().warning(
            "config.env_file_unreadable", path=str(path), problem=exc.strerror
        )
        return {}


def _place_data(data: dict[str, Any], folder: Path) -> None:
    """Put the database, the state file and the socket in `folder` unless the file places them."""
    defaults = {
        ("database", "url"): paths.sqlite_url(folder / "backthink.db"),
        ("state", "file"): str(folder / "state.json"),
        ("daemon", "socket"): str(folder / "backthink.sock"),
    }
    for (section, key), value in defaults.items():
        table = data.setdefault(section, {})
        if isinstance(table, dict):
            table.setdefault(key, value)


def _apply_env_file(
    data: dict[str, Any], file_env: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    """Set the overrides of backthink.env into `data`, except those the environment sets.

    Returns:
        The variables applied, each with the config path it sets.
    """
    present = {name.lower() for name in env}
    applied = {
        name: keys for name, keys in _env_overrides(file_env).items() if name.lower() not in present
    }
    for name, keys in applied.items():
        table = data
        for part in keys[:-1]:
            child = table.setdefault(part, {})
            if not isinstance(child, dict):
                break
            table = child
        else:
            table[keys[-1]] = _env_value(file_env[name])
    return applied


def _env_value(text: str) -> Any:
    # As for the environment, a list or a table is written as JSON.
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Map each `BACKTHINK_<SECTION>[__<KEY>...]` variable to the config path it sets.

    pydantic-settings silently ignores a variable whose section does not exist, so
    a mistyped section would change nothing without a word; it is refused here.
    Variables without `__` that name no section (BACKTHINK_CONFIG, or another
    program's BACKTHINK_*) are not overrides and are left alone.

    Raises:
        ConfigError: a `BACKTHINK_X__...` variable whose section X does not exist.
    """
    prefix = Settings.model_config.get("env_prefix", "").lower()
    delimiter = Settings.model_config.get("env_nested_delimiter") or "__"
    overrides: dict[str, tuple[str, ...]] = {}
    for name in env:
        if not name.lower().startswith(prefix):
            continue
        path = tuple(name[len(prefix) :].lower().split(delimiter))
        if path[0] in Settings.model_fields:
            overrides[name] = path
        elif len(path) > 1:
            raise ConfigError(f"environment {name}: unknown section {path[0]}")
    return overrides


def _comes_from(path: tuple[str, ...], loc: tuple[str, ...]) -> bool:
    """Whether an error at `loc` lies under the config path an environment variable sets.

    The path's parts must appear in `loc` in order, first part first; `loc` may hold
    more, such as the channel type that pydantic puts between a channel and its key.
    """
    if not loc or loc[0] != path[0]:
        return False
    rest = iter(loc)
    return all(part in rest for part in path)


def _first_problem(exc: ValidationError) -> tuple[tuple[str, ...], str]:
    """Return the first validation error's location and its rendering as `key.path: message`."""
    err = exc.errors(include_url=False)[0]
    parts = [str(part) for part in err["loc"] if not str(part).endswith("Settings")]
    key = ".".join(parts)
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    message = message.removeprefix("Value error, ")
    return tuple(part.lower() for part in parts), (f"{key}: {message}" if key else message)
