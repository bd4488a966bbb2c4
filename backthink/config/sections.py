"""The sections of the settings file, each a frozen pydantic model with its defaults."""

from __future__ import annotations

import re
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from backthink.config.paths import sqlite_path
from backthink.config.values import LOOPBACK_HOSTS, Duration, QuietHours, split_listen
from backthink.errors import ConfigError
from backthink.models import known_zone
from backthink.redact import redact_url


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
    # A heartbeat that would ask the model what the last silent round asked is skipped
    # (`skipped/unchanged`), until that round is older than `max_silence`.
    skip_unchanged: bool = True
    max_silence: Duration = timedelta(hours=4)

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

    @field_validator("heartbeat", "quiet_heartbeat", "max_silence")
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
    # None ("") means the session channel, then any other channel that can deliver now.
    default_channel: str | None = None
    channel_cooldown: Duration = timedelta(minutes=10)

    @field_validator("default_channel", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


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
    # items at most; the characters left of max_chars decide how many fit
    recall: int = Field(default=20, ge=0, le=100)
    # characters: the journal and the recalled items together
    max_chars: int = Field(default=1_200, ge=0, le=100_000)
    # characters: a round's thought is cut past this before it is kept
    thought_chars: int = Field(default=400, ge=0, le=100_000)


MIN_TOOLS_CHARS = 600
"""The least `tools.max_chars`: room for tool_search itself and a short list of names."""

_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,23}")


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
    # characters of the tool definitions a round offers before the model asks for more
    # (compact JSON, as sent); past it, tools wait behind tool_search
    max_chars: int = Field(default=2_000, ge=MIN_TOOLS_CHARS, le=1_000_000)
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


class _Listener(_Section):
    """A door of the daemon: off unless `listen` names a host:port."""

    listen: str = ""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        value = value.strip()
        if value:
            split_listen(value)
        return value

    @property
    def address(self) -> tuple[str, int] | None:
        """The (host, port) to listen on, or None when the door is off."""
        return split_listen(self.listen) if self.listen else None


class WebSettings(_Listener):
    """The daemon's own page: off unless `listen` names an address."""

    token: SecretStr | None = None

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


class ApiSettings(_Listener):
    """The HTTP API for chat apps and the relay: off unless `listen` names an address."""

    # A client that read the session this recently counts as present: the session
    # channel (type web) is connected while one is, or while an event stream is open.
    seen_window: Duration = timedelta(minutes=10)
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=1_073_741_824)
    cors_origins: list[str] = Field(default_factory=list)  # browser pages that may call /v1/

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.fullmatch(r"https?://[^/\s?#]+", origin.rstrip("/")):
                raise ValueError(f"{origin!r} is not an origin such as http://localhost:3000")
        return [origin.rstrip("/") for origin in value]

    @property
    def loopback(self) -> bool:
        """Whether the API listens on a loopback address only."""
        address = self.address
        return address is not None and address[0] in LOOPBACK_HOSTS


class RelaySettings(_Section):
    """Where the relay forwards chat completions: another endpoint, or the model's own."""

    upstream: str = ""
    api_key: SecretStr | None = None

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{redact_url(value)!r} is not an http(s) URL")
        return value

    @property
    def secret(self) -> str | None:
        """The upstream's key, or None when none is set (the model's key is used then)."""
        key = self.api_key.get_secret_value() if self.api_key is not None else ""
        return key or None
