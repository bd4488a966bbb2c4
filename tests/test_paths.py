"""Where the config is found and where its paths point: never the working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S

from backthink.config import load_settings, paths
from backthink.errors import ConfigError
from backthink.testing import run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of its own, no XDG variables, no system config, no key in the environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "STATE_DIRECTORY", "BACKTHINK_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("BACKTHINK_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setattr(paths, "SYSTEM_CONFIG", tmp_path / "etc/backthink/backthink.toml")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_lookup_order(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config, $BACKTHINK_CONFIG, ./config, the XDG config folder, /etc, then none."""
    env = dict(os.environ)
    assert paths.find_config(None, env, system=paths.SYSTEM_CONFIG) is None
    system = _write(paths.SYSTEM_CONFIG)
    assert paths.find_config(None, env, system=system) == system
    user = _write(home / ".config/backthink/backthink.toml")
    assert paths.find_config(None, env, system=system) == user
    xdg = _write(tmp_path / "xdg/backthink/backthink.toml")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    assert paths.find_config(None, env, system=system) == xdg
    checkout = _write(Path("config/backthink.toml")).absolute()
    assert paths.find_config(None, env, system=system) == checkout
    env["BACKTHINK_CONFIG"] = "elsewhere.toml"
    assert paths.find_config(None, env, system=system) == Path.cwd() / "elsewhere.toml"
    assert paths.find_config(Path("given.toml"), env, system=system) == Path.cwd() / "given.toml"


def test_relative_xdg_value_is_ignored(home: Path) -> None:
    """A relative $XDG_CONFIG_HOME would follow the working directory: the default is used."""
    env = {"HOME": str(home), "XDG_CONFIG_HOME": "rel", "XDG_STATE_HOME": "rel"}
    assert paths.user_config_path(env) == home / ".config/backthink/backthink.toml"
    assert paths.data_dir(env) == home / ".local/state/backthink"


def test_relative_paths_follow_the_config_file(home: Path, tmp_path: Path) -> None:
    """The same file names the same files from any working directory."""
    config = _write(
        tmp_path / "conf/backthink.toml",
        '[database]\nurl = "sqlite+aiosqlite:///data/bt.db?mode=rwc"\n'
        '[state]\nfile = "../state.json"\n[persona]\nprompt_file = "persona.md"\n'
        '[prompt]\ndir = "prompts"\n[daemon]\nsocket = "~/bt.sock"\n',
    )
    seen = []
    for cwd in (tmp_path, home):
        os.chdir(cwd)
        s = load_settings(Path(os.path.relpath(config)))
        seen.append((s.database.url, s.state.file, s.persona.prompt_file, s.prompt.dir))
        assert s.daemon.socket == home / "bt.sock"
    assert (
        seen[0]
        == seen[1]
        == (
            f"sqlite+aiosqlite:///{tmp_path}/conf/data/bt.db?mode=rwc",
            tmp_path / "state.json",
            tmp_path / "conf/persona.md",
            tmp_path / "conf/prompts",
        )
    )


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite:////abs/bt.db",
        "postgresql+psycopg://u:p@host/db",
    ],
)
def test_urls_without_a_relative_file_stay(url: str) -> None:
    """In-memory, absolute and server URLs are left as written."""
    assert paths.anchor_sqlite_url(url, Path("/base")) == url


def test_empty_paths_keep_their_meaning(home: Path, tmp_path: Path) -> None:
    """An empty state file is none, an empty prompt folder or persona file the shipped one."""
    config = _write(
        tmp_path / "c/backthink.toml",
        '[state]\nfile = ""\n[prompt]\ndir = ""\n[persona]\nprompt_file = ""\n',
    )
    s = load_settings(config)
    assert (s.state.file, s.prompt.dir, s.persona.prompt_file) == (None, None, None)


def test_data_not_placed_goes_to_the_state_folder(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a file, data lives under ~/.local/state/backthink, or systemd's state folder."""
    s = load_settings()
    folder = home / ".local/state/backthink"
    assert s.database.url == f"sqlite+aiosqlite:///{folder}/backthink.db"
    assert (s.state.file, s.daemon.socket) == (folder / "state.json", folder / "backthink.sock")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xs"))
    assert load_settings().state.file == tmp_path / "xs/backthink/state.json"
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/backthink")
    assert load_settings().database.url == "sqlite+aiosqlite:////var/lib/backthink/backthink.db"


def test_env_file_beside_the_config(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """backthink.env holds the key and overrides; the real environment still wins over it."""
    config = _write(tmp_path / "c/backthink.toml", "[gate]\ndaily_cap = 3\n")
    _write(
        tmp_path / "c/backthink.env",
        "# secrets\nOPENAI_API_KEY='sk-from-file'\nBACKTHINK_GATE__DAILY_CAP=5\n"
        'BACKTHINK_SCHEDULE__CRON=["0 8 * * *"]\n',
    )
    s = load_settings(config)
    assert s.model.api_key is not None and s.model.api_key.get_secret_value() == "sk-from-file"
    assert (s.gate.daily_cap, s.schedule.cron) == (5, ["0 8 * * *"])
    monkeypatch.setenv("BACKTHINK_GATE__DAILY_CAP", "7")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    s = load_settings(config)
    assert s.gate.daily_cap == 7
    assert s.model.api_key is not None and s.model.api_key.get_secret_value() == "sk-env"


def test_api_key_env_names_the_variable(home: Path, tmp_path: Path) -> None:
    """model.api_key_env picks which variable holds the key."""
    config = _write(tmp_path / "c/backthink.toml", '[model]\napi_key_env = "MY_LLM_KEY"\n')
    _write(tmp_path / "c/backthink.env", "OPENAI_API_KEY=sk-other\nMY_LLM_KEY=sk-mine\n")
    s = load_settings(config)
    assert s.model.api_key is not None and s.model.api_key.get_secret_value() == "sk-mine"


def test_bad_value_in_env_file_is_named(home: Path, tmp_path: Path) -> None:
    """A wrong value in backthink.env is reported with the file and the variable."""
    config = _write(tmp_path / "c/backthink.toml")
    _write(tmp_path / "c/backthink.env", "BACKTHINK_GATE__DAILY_CAP=many\n")
    with pytest.raises(ConfigError, match=r"backthink\.env BACKTHINK_GATE__DAILY_CAP: gate"):
        load_settings(config)


def test_commands_from_two_folders_share_one_database(tmp_path: Path) -> None:
    """Two commands run in different folders with one config write to the same database."""
    conf = _write(
        tmp_path / "conf/backthink.toml", '[database]\nurl = "sqlite+aiosqlite:///bt.db"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    env["HOME"] = str(tmp_path / "home")
    outputs = []
    for cwd in (tmp_path, tmp_path / "conf"):
        proc = run_cli(
            conf,
            "messages",
            "add",
            "--role",
            "user",
            "--text",
            "hi",
            cwd=cwd,
            env=env,
            timeout_s=CLI_TIMEOUT_S,
        )
        outputs.append(proc.stdout.strip())
    assert outputs == ["added message 1", "added message 2"]
    assert (tmp_path / "conf/bt.db").is_file()
    assert not (tmp_path / "bt.db").exists()
