"""Settings: a TOML file, environment overrides, validated into frozen pydantic models.

Precedence, highest first: `BACKTHINK_<SECTION>__<KEY>` environment variables,
the same variables in `backthink.env` beside the config file, the TOML file,
built-in defaults. The variable `model.api_key_env` names (`OPENAI_API_KEY`), from
the environment or that file, fills `model.api_key` when nothing else sets it.
Where the file is looked for and how its paths resolve: `backthink.config.paths`.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    SecretStr,
    ValidationError,
)

import backthink.config.paths as paths
import backthink.config.problems as problems
from backthink.config.owners import config_owners, owner_settings
from backthink.config.settings import Settings
from backthink.errors import ConfigError

CONFIG_ENV = "BACKTHINK_CONFIG"


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
        loc, problem = problems.describe(exc, Settings)
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

        structlog.get_logger(__name__).warning(
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
