"""All of backthink's configuration in one frozen model: the sections, channels and owners."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from backthink.config.channels import ChannelSettings, _default_channels
from backthink.config.sections import (
    ApiSettings,
    DaemonSettings,
    DatabaseSettings,
    GateSettings,
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

_OWNER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")


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
    api: ApiSettings = ApiSettings()
    relay: RelaySettings = RelaySettings()
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
