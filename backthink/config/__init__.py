"""Settings: value types, the sections of the file, owners' settings, the loader.

Everything else imports its settings from here; this room imports only the
ground floor.
"""

from backthink.config.channels import (
    AppriseChannelSettings,
    ChannelSettings,
    WebChannelSettings,
    WebhookChannelSettings,
)
from backthink.config.loader import CONFIG_ENV, load_settings, resolve_config_path
from backthink.config.sections import (
    ApiSettings,
    DaemonSettings,
    DatabaseSettings,
    GateSettings,
    McpServerSettings,
    MemorySettings,
    ModelSettings,
    OwnerEntry,
    OwnerSettings,
    PersonaSettings,
    PromptSettings,
    RelaySettings,
    ScheduleSettings,
    StateSettings,
    ToolsSettings,
    WebSettings,
    WorkerSettings,
)
from backthink.config.settings import Settings
from backthink.config.values import (
    LOOPBACK_HOSTS,
    Duration,
    QuietHours,
    parse_duration,
    split_listen,
)
from backthink.models import known_zone

__all__ = [
    "CONFIG_ENV",
    "LOOPBACK_HOSTS",
    "ApiSettings",
    "AppriseChannelSettings",
    "ChannelSettings",
    "DaemonSettings",
    "DatabaseSettings",
    "Duration",
    "GateSettings",
    "McpServerSettings",
    "MemorySettings",
    "ModelSettings",
    "OwnerEntry",
    "OwnerSettings",
    "PersonaSettings",
    "PromptSettings",
    "QuietHours",
    "RelaySettings",
    "ScheduleSettings",
    "Settings",
    "StateSettings",
    "ToolsSettings",
    "WebChannelSettings",
    "WebSettings",
    "WebhookChannelSettings",
    "WorkerSettings",
    "known_zone",
    "load_settings",
    "parse_duration",
    "resolve_config_path",
    "split_listen",
]
