"""`backthink init`: the starter config, and the key in its own file beside it.

The starter is short and commented: the owner's time zone and language, the
endpoint and the model, and absolute paths for the data, so every process that
reads it (a shell, the user unit, the system unit) uses the same files. A key
given on the command line goes to `backthink.env` (mode 0600), which every command
reads and the systemd unit passes as `EnvironmentFile=`; never into the TOML.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal
from pydantic import ValidationError

from backthink.config import Settings, paths, problems
from backthink.config.shipped import data_file
from backthink.errors import ConfigError, InputError
from backthink.models import Language

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
KEY_VARIABLE = "BACKTHINK_MODEL__API_KEY"
UTC_NAMES = frozenset({"Etc/UTC", "Etc/Universal", "UCT", "Zulu"})  # written as plain "UTC"
_ENV_SAFE = re.compile(r"[A-Za-z0-9._~+/=:@-]*")


@dataclass(frozen=True)
class Answers:
    """What the starter config is written from."""

    base_url: str | None
    model: str
    timezone: str
    language: Language
    api_key: str | None = None
    api_key_env: str | None = None
    owner_name: str = ""


@dataclass(frozen=True)
class Written:
    """The files `write_starter` wrote."""

    config: Path
    env_file: Path | None
    data_dir: Path


def is_system_path(path: Path) -> bool:
    """Whether a config path belongs to the system service (under /etc)."""
    return path.absolute().is_relative_to("/etc")


def data_dir_for(config: Path, env: Mapping[str, str], data: Path | None = None) -> Path:
    """Where a new config keeps its data, unless `data` says where.

    /var/lib/backthink for a system config, the user's state folder for the
    user's own config, and a folder beside any other config (`NAME-data` for
    `NAME.toml`), so two configs never share one database unasked.
    """
    if data is not None:
        return data.absolute()
    if is_system_path(config):
        return paths.SYSTEM_DATA_DIR
    if config.absolute() == paths.user_config_path(env).absolute():
        return paths.user_data_dir(env)
    return config.absolute().with_name(f"{config.stem}-data")


def local_timezone(find: Callable[[], str | None] = tzlocal.get_localzone_name) -> str:
    """The machine's IANA zone name, as tzlocal finds it; UTC when it finds none.

    tzlocal reads $TZ, then the system's files. Where the /etc/localtime link
    and /etc/timezone disagree it trusts the link: `timedatectl` changes only
    the link, and some distributions leave a stale /etc/timezone behind.

    Args:
        find: what names the zone (tzlocal's, a fake root's in tests); None for
            no zone configured.
    """
    try:
        name = find()
    except ZoneInfoNotFoundError:
        # The files disagree, and /etc/timezone is not the odd one out.
        return "UTC"
    if not name:
        return "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"
    return "UTC" if name in UTC_NAMES else name


def local_language(env: Mapping[str, str]) -> Language:
    """zh when the locale is Chinese, else en."""
    locale = env.get("LC_ALL") or env.get("LC_MESSAGES") or env.get("LANG") or ""
    return "zh" if locale.lower().startswith("zh") else "en"


def render_starter(answers: Answers, data_dir: Path) -> str:
    """The starter config's text, commented for someone who has not read the docs."""
    example = data_file("backthink.example.toml")
    if answers.base_url:
        endpoint = f"base_url = {_q(answers.base_url)}"
    else:
        endpoint = f"# base_url = {_q(DEFAULT_BASE_URL)}"
    if answers.api_key is not None:
        key = f"# The key is in {paths.ENV_FILE_NAME} beside this file ({KEY_VARIABLE})."
    else:
        variable = answers.api_key_env or "OPENAI_API_KEY"
        key = (
            f"# The key is read from ${variable}, or from a {variable}= line in\n"
            f"# {paths.ENV_FILE_NAME} beside this file.\napi_key_env = {_q(variable)}"
        )
    return f"""\
# backthink's configuration, written by `backthink init`.
# Every key, with its default and what it does:
# {example}
# Relative paths are relative to this file's folder. Secrets (the model key,
# channel secrets) belong in {paths.ENV_FILE_NAME} beside this file, never here.

[owner]
id = "default"
# How prompts refer to the owner.
name = {_q(answers.owner_name)}
# Quiet hours, the prompt's clock and the daily cap follow this IANA time zone.
timezone = {_q(answers.timezone)}

[persona]
id = "companion"
name = ""
# Your own persona prompt (a text file); "" = the one shipped with backthink.
prompt_file = ""

[model]
# Any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp, ...).
{endpoint}
name = {_q(answers.model)}
{key}

[prompt]
# "zh" or "en": the language of the prompts.
language = {_q(answers.language)}
# A folder of your own guidance/startup templates; "" = the shipped ones.
dir = ""

[database]
url = {_q(paths.sqlite_url(data_dir / "backthink.db"))}

[state]
# JSON written by other programs: availability, device, schedule, notes.
file = {_q(str(data_dir / "state.json"))}

[daemon]
# `backthink poke` reaches the running daemon here.
socket = {_q(str(data_dir / "backthink.sock"))}

[gate]
# The owner's local night: only critical messages pass inside it.
quiet_hours = "23:00-07:00"

[channels.web]
# The main session itself: messages wait there for your chat app.
type = "web"
"""


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_starter(
    path: Path,
    answers: Answers,
    *,
    force: bool,
    env: Mapping[str, str],
    data: Path | None = None,
) -> Written:
    """Write the starter config (and the key's env file), refusing to overwrite without `force`.

    `data` is the folder of its database, state file and socket (default: `data_dir_for`).

    Raises:
        InputError: the config exists and `force` is not set, or an answer is unusable.
        ConfigError: a file cannot be written.
    """
    path = path.absolute()
    if path.exists() and not force:
        raise InputError(f"{path} exists: pass --force to overwrite it")
    if answers.api_key is not None and (not answers.api_key or "\n" in answers.api_key):
        raise InputError("--api-key: the key is empty or spans lines")
    data_dir = data_dir_for(path, env, data)
    text = render_starter(answers, data_dir)
    try:
        Settings(**tomllib.loads(text))
    except ValidationError as exc:
        raise InputError(problems.describe(exc, Settings)[1]) from None
    # The system unit's throwaway user must read the config; a user's is their own.
    mode = 0o644 if is_system_path(path) else 0o600
    env_file = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(path, text, mode)
        if answers.api_key is not None:
            env_file = path.with_name(paths.ENV_FILE_NAME)
            _write_private(env_file, _env_text(env_file, answers.api_key), 0o600)
    except OSError as exc:
        where = Path(exc.filename) if exc.filename else path
        problem = paths.folder_problem(path.parent, exc)
        raise ConfigError(f"cannot write {where}: {problem}") from None
    return Written(config=path, env_file=env_file, data_dir=data_dir)


def _env_text(env_file: Path, key: str) -> str:
    """The env file with the key set, keeping every other line already there."""
    kept = []
    try:
        kept = [
            line
            for line in env_file.read_text(encoding="utf-8").splitlines()
            if not line.strip().startswith(f"{KEY_VARIABLE}=")
        ]
    except FileNotFoundError:
        kept = [
            "# Secrets for backthink: every backthink command reads this file, and the",
            "# systemd unit passes it as EnvironmentFile=. Keep it mode 0600.",
        ]
    value = (
        key
        if _ENV_SAFE.fullmatch(key)
        else '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    )
    return "\n".join([*kept, f"{KEY_VARIABLE}={value}"]) + "\n"


def _write_private(path: Path, text: str, mode: int) -> None:
    """Write a file through a temporary one, created with `mode`, then moved into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # an old temporary file keeps its mode otherwise
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            fd = -1
            out.write(text)
        os.replace(tmp, path)
    finally:
        if fd != -1:
            os.close(fd)
        tmp.unlink(missing_ok=True)
