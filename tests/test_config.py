"""Configuration: TOML, environment overrides, validation errors that name the key."""

from __future__ import annotations

from datetime import time, timedelta
from pathlib import Path

import pytest

from backthink.config import QuietHours, load_settings, parse_duration
from backthink.errors import ConfigError, StoreError
from backthink.store.engine import create_engine

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in ("OPENAI_API_KEY", "BACKTHINK_CONFIG", "BACKTHINK_MODEL__BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    # The machine's own configs and state must not leak into these tests.
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "STATE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("backthink.config.paths.SYSTEM_CONFIG", home / "etc/backthink.toml")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_configs_load() -> None:
    """The default and the example config both validate."""
    default = load_settings(ROOT / "config/backthink.toml")
    example = load_settings(ROOT / "config/backthink.example.toml")
    # The checkout's config keeps its data in var/ at the top of the checkout.
    assert default.database.url == f"sqlite+aiosqlite:///{ROOT}/var/backthink.db"
    assert default.state.file == ROOT / "var/state.json"
    assert set(example.channels) == {"web", "phone", "telegram"}
    assert example.gate.default_channel is None  # "": the session, then any that can deliver


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file at all gives the documented defaults."""
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.prompt.recent_messages == 20
    assert s.gate.quiet_hours == QuietHours(start=time(23), end=time(7))
    assert s.schedule.heartbeat == timedelta(minutes=30)
    assert s.model.base_url is None
    assert list(s.channels) == ["web"]


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BACKTHINK_<SECTION>__<KEY> wins over the file."""
    path = write(tmp_path, '[gate]\ndaily_cap = 3\n[model]\nname = "a"\n')
    monkeypatch.setenv("BACKTHINK_GATE__DAILY_CAP", "7")
    s = load_settings(path)
    assert s.gate.daily_cap == 7
    assert s.model.name == "a"


def test_config_path_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BACKTHINK_CONFIG picks the file when --config is not given."""
    path = write(tmp_path, '[owner]\nid = "x"\n')
    monkeypatch.setenv("BACKTHINK_CONFIG", str(path))
    assert load_settings().owner.id == "x"


def test_openai_api_key_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_API_KEY fills model.api_key only when nothing else sets it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    s = load_settings(write(tmp_path, ""))
    assert s.model.api_key is not None and s.model.api_key.get_secret_value() == "sk-env"
    s = load_settings(write(tmp_path, '[model]\napi_key = "sk-file"\n'))
    assert s.model.api_key is not None and s.model.api_key.get_secret_value() == "sk-file"
    assert "sk-file" not in repr(s)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[gate]\ndaily_kap = 3\n", "gate.daily_kap: unknown key"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown section"),
        ("[gaet]\ndaily_cap = 2\n", "gaet: unknown section (did you mean gate?)"),
        ("[gate]\ndaily_cpa = 2\n", "gate.daily_cpa: unknown key (did you mean daily_cap?)"),
        (
            '[schedule]\nheartbeat = "99999999999d"\n',
            "schedule.heartbeat: '99999999999d' is too long",
        ),
        ("[schedule]\nheartbeat = 1e300\n", "schedule.heartbeat: 1e+300 is too long"),
        ("[schedule]\nheartbeat = inf\n", "schedule.heartbeat: inf is too long"),
        (
            "[schedule]\njitter = -5\n",
            "schedule.jitter: -5 is not a duration: it must not be negative",
        ),
        ("[gate]\ndaily_cap = -1\n", "gate.daily_cap:"),
        ('[gate]\nquiet_hours = "25:00-07:00"\n', "gate.quiet_hours:"),
        ('[gate]\nmin_interval = "soon"\n', "gate.min_interval:"),
        ('[owner]\ntimezone = "Mars/Olympus"\n', "owner.timezone: unknown time zone"),
        ('[model]\nbase_url = "localhost:8000"\n', "model.base_url:"),
        ('[prompt]\nlanguage = "fr"\n', "prompt.language:"),
        ('[channels.x]\ntype = "pigeon"\n', "channels.x.type: 'pigeon' is not one of the types"),
        ('[channels.x]\nurl = "http://x"\n', "channels.x.type: is missing"),
        ('[channels.x]\ntype = "webhook"\n', "channels.x.url: Field required"),
        ('[channels.x]\ntype = "webhook"\nurl = "ftp://x"\n', "channels.x.url: 'ftp://x'"),
        (
            '[channels.x]\ntype = "webhook"\nurl = "http://x"\nsecert = "s"\n',
            "(did you mean secret?)",
        ),
        ("[gate\n", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, expected: str) -> None:
    """Every validation error is one line naming the file and the key."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """An explicit path that does not exist is a clear error."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "BACKTHINK_GAET__DAILY_CAP",
            "3",
            "environment BACKTHINK_GAET__DAILY_CAP: unknown section gaet",
        ),
        (
            "BACKTHINK_GATE__DAILY_KAP",
            "3",
            "environment BACKTHINK_GATE__DAILY_KAP: gate.daily_kap: unknown key",
        ),
        (
            "BACKTHINK_GATE__DAILY_CAP",
            "-1",
            "environment BACKTHINK_GATE__DAILY_CAP: gate.daily_cap:",
        ),
        (
            "backthink_gate__min_interval",
            "soon",
            "environment backthink_gate__min_interval: gate.min_interval:",
        ),
        (
            "BACKTHINK_CHANNELS__PHONE__URL",
            "localhost:9000",
            "environment BACKTHINK_CHANNELS__PHONE__URL: channels.phone.url:",
        ),
    ],
)
def test_bad_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    """A wrong override is blamed on its environment variable, in one line, never on the file."""
    path = write(
        tmp_path,
        '[gate]\ndaily_cap = 3\n[channels.phone]\ntype = "webhook"\nurl = "https://h/hook"\n',
    )
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert message.startswith(expected)
    assert str(path) not in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_other_backthink_variables_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Variables that are not section overrides, such as BACKTHINK_CONFIG, are no error."""
    path = write(tmp_path, "[gate]\ndaily_cap = 3\n")
    monkeypatch.setenv("BACKTHINK_CONFIG", str(path))
    monkeypatch.setenv("BACKTHINK_LIVE_MODEL", "some-model")
    monkeypatch.setenv("BACKTHINK_SCHEDULE__HEARTBEAT", "5m")
    s = load_settings()
    assert s.gate.daily_cap == 3
    assert s.schedule.heartbeat == timedelta(minutes=5)


def test_settings_are_frozen(tmp_path: Path) -> None:
    """Loaded settings cannot be changed by accident."""
    s = load_settings(write(tmp_path, ""))
    with pytest.raises(Exception, match="frozen"):
        s.gate.daily_cap = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d", 86400),
        ("45", 45),
        (12, 12),
        ("500ms", 0.5),
    ],
)
def test_durations(text: str | int, seconds: float) -> None:
    """Durations accept the documented spellings."""
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "m", "3x", "1h 2q", "-5m", "abc"])
def test_bad_durations(text: str) -> None:
    """Anything else is rejected, never read as zero."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_quiet_hours_off() -> None:
    """An empty quiet-hours string turns them off."""
    assert QuietHours.parse("") is None
    assert str(QuietHours.parse("23:00-07:00")) == "23:00-07:00"


def test_example_config_documents_every_key() -> None:
    """Every key of every section appears in the example config, with a comment beside it."""
    import tomllib

    from backthink.config import Settings

    text = (ROOT / "config/backthink.example.toml").read_text(encoding="utf-8")
    documented = tomllib.loads(text)
    lines = text.splitlines()
    assert "# [owners.ana]" in lines  # a table of owners, shown commented out
    for section, field in Settings.model_fields.items():
        if section in {"channels", "owners"}:
            continue
        model = field.annotation
        assert model is not None
        for key in model.model_fields:  # type: ignore[union-attr]
            assert key in documented.get(section, {}), f"{section}.{key} is not in the example"
            if f"[{section}.{key}]" in lines:
                # A table of tables (tools.mcp): its header, then a comment saying what goes in.
                table = lines.index(f"[{section}.{key}]")
                assert lines[table + 1].startswith("#"), f"{section}.{key} has no comment"
                continue
            header = lines.index(f"[{section}]")
            line = next(ln for ln in lines[header:] if ln.startswith(f"{key} ="))
            assert "#" in line, f"{section}.{key} has no comment"


def test_an_empty_state_file_means_no_state_file() -> None:
    from backthink.config import Settings

    assert Settings.model_validate({"state": {"file": ""}}).state.file is None
    assert Settings.model_validate({"state": {"file": "  "}}).state.file is None


def test_a_database_folder_under_a_file_names_the_file(tmp_path: Path) -> None:
    """A file standing where the database's folder should be is named, not "File exists"."""
    blocker = tmp_path / "data"
    blocker.write_text("not a folder", encoding="utf-8")
    for url in (f"sqlite+aiosqlite:///{blocker}/x.db", f"sqlite+aiosqlite:///{blocker}/sub/x.db"):
        with pytest.raises(StoreError) as info:
            create_engine(url)
        assert f"{blocker} is a file, not a folder" in str(info.value)
