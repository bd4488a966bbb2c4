"""Where backthink looks for its config and keeps its data, whatever the working directory.

The config is the first of: `--config`, `$BACKTHINK_CONFIG`, `./config/backthink.toml`
(a checkout), `$XDG_CONFIG_HOME/backthink/backthink.toml`, `/etc/backthink/backthink.toml`.
A relative path inside a config file is relative to the file's own folder, so the
same file names the same database and state file from wherever it is used. Data
not named by the config lives in the state folder: `$STATE_DIRECTORY` when systemd
runs the daemon (`/var/lib/backthink` for the system unit), else
`$XDG_STATE_HOME/backthink` (default `~/.local/state/backthink`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

CHECKOUT_CONFIG = Path("config/backthink.toml")
SYSTEM_CONFIG = Path("/etc/backthink/backthink.toml")
SYSTEM_DATA_DIR = Path("/var/lib/backthink")
CONFIG_NAME = "backthink.toml"
ENV_FILE_NAME = "backthink.env"  # secrets beside the config; systemd reads it as EnvironmentFile=

# Config keys whose values are file paths, as (section, key); "*" matches any table name.
PATH_KEYS: tuple[tuple[str, ...], ...] = (
    ("persona", "prompt_file"),
    ("prompt", "dir"),
    ("database", "spill_file"),
    ("state", "file"),
    ("daemon", "socket"),
    ("owners", "*", "state_file"),
)
_SQLITE_FILE = re.compile(r"(?P<scheme>sqlite[^:]*:///)(?P<path>[^?]*)(?P<query>\?.*)?", re.I)


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def _xdg(env: Mapping[str, str], name: str, default: str) -> Path:
    # The XDG spec ignores a relative value: it would follow the working directory.
    value = env.get(name, "")
    return Path(value) if os.path.isabs(value) else _home(env) / default


def user_config_path(env: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/backthink/backthink.toml` (default `~/.config/backthink/...`)."""
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / "backthink" / CONFIG_NAME


def user_data_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_STATE_HOME/backthink` (default `~/.local/state/backthink`)."""
    return _xdg(env, "XDG_STATE_HOME", ".local/state") / "backthink"


def data_dir(env: Mapping[str, str]) -> Path:
    """The folder for data a config does not name: systemd's state folder, else the user's."""
    # systemd sets $STATE_DIRECTORY for a unit with StateDirectory= (colon-separated).
    given = env.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(given) if os.path.isabs(given) else user_data_dir(env)


def find_config(
    explicit: Path | None, env: Mapping[str, str], *, system: Path = SYSTEM_CONFIG
) -> Path | None:
    """The config file to use, as an absolute path, or None for the built-in defaults.

    An explicit path or $BACKTHINK_CONFIG is returned even when it does not exist
    (loading it then says so); the other places count only when a file is there.
    """
    if explicit is not None:
        return explicit.absolute()
    if env.get("BACKTHINK_CONFIG"):
        return Path(env["BACKTHINK_CONFIG"]).absolute()
    for candidate in (CHECKOUT_CONFIG.absolute(), user_config_path(env), system):
        if candidate.is_file():
            return candidate
    return None


def anchor_paths(data: dict[str, Any], base: Path) -> None:
    """Make the file paths of a config file's data absolute against the file's folder, in place.

    An empty value keeps its meaning ("none" or "the shipped default"); a SQLite
    URL's file is anchored like any other path.
    """
    for keys in PATH_KEYS:
        for table, key in _tables(data, keys):
            value = table.get(key)
            if isinstance(value, str) and value.strip():
                table[key] = anchor(value, base)
    database = data.get("database")
    if isinstance(database, dict) and isinstance(database.get("url"), str):
        database["url"] = anchor_sqlite_url(database["url"], base)


def _tables(data: dict[str, Any], keys: tuple[str, ...]) -> list[tuple[dict[str, Any], str]]:
    tables = [data]
    for part in keys[:-1]:
        found: list[dict[str, Any]] = []
        for table in tables:
            children = table.values() if part == "*" else [table.get(part)]
            found.extend(child for child in children if isinstance(child, dict))
        tables = found
    return [(table, keys[-1]) for table in tables]


def anchor(value: str, base: Path) -> str:
    """`value` as an absolute path: `~` expanded, a relative one taken from `base`."""
    path = Path(value).expanduser()
    return path.as_posix() if path.is_absolute() else os.path.normpath(base / path)


def anchor_sqlite_url(url: str, base: Path) -> str:
    """A SQLite URL whose relative file is made absolute against `base`; other URLs as given."""
    match = _SQLITE_FILE.fullmatch(url.strip())
    if match is None:
        return url
    path = match["path"]
    prefix = "file:" if path.startswith("file:") else ""
    path = path.removeprefix("file:")
    if not path or path == ":memory:" or path.startswith("/"):
        return url
    return f"{match['scheme']}{prefix}{anchor(path, base)}{match['query'] or ''}"


def sqlite_url(path: Path) -> str:
    """The SQLite URL of a database file."""
    return f"sqlite+aiosqlite:///{path}"


def read_env_file(path: Path) -> dict[str, str]:
    """Read `NAME=value` lines the way systemd's EnvironmentFile= does (comments, quotes).

    Raises:
        OSError: the file exists but cannot be read.
    """
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        name, _, value = line.partition("=")
        name, value = name.strip().removeprefix("export ").strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if name:
            values[name] = value
    return values


def is_memory(url: URL) -> bool:
    """Whether a SQLite URL names an in-memory database."""
    database = url.database or ""
    return not database or ":memory:" in database or "mode=memory" in database


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for other databases and in-memory ones."""
    if url.get_backend_name() != "sqlite" or is_memory(url):
        return None
    # A `uri=true` URL names the file as "file:path?options".
    return Path((url.database or "").removeprefix("file:").partition("?")[0])


def folder_problem(folder: Path, exc: OSError) -> str:
    """Why `folder` could not be created, in words: a part of its path that is a file is named.

    `mkdir` says only "File exists" or "Not a directory" when a file stands
    where a folder should be; the user needs to know which file.
    """
    for part in (folder, *folder.parents):
        if part.exists() and not part.is_dir():
            return f"{part} is a file, not a folder"
    return exc.strerror or str(exc)


def shadowed_config(found: Path | None, env: Mapping[str, str]) -> Path | None:
    """The user's own config file when a checkout's `config/backthink.toml` is read instead.

    Inside a clone, `./config/backthink.toml` comes first in the search order, so a
    config that `backthink init` wrote for the user is silently not read there.
    """
    if found is None or found != CHECKOUT_CONFIG.absolute():
        return None
    mine = user_config_path(env)
    return mine if mine.is_file() and mine != found else None


def config_notice(found: Path | None, env: Mapping[str, str]) -> str | None:
    """One line for a command that reads `found`, when a checkout's config shadows the user's."""
    mine = shadowed_config(found, env)
    if mine is None:
        return None
    return (
        f"note: reading this checkout's {found}, not your {mine}: "
        f"it comes first inside the checkout; pass --config {mine} to use yours"
    )
