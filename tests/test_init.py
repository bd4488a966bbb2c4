"""`backthink init`: a starter config, its key in a private file, then a check."""

from __future__ import annotations

import functools
import importlib.resources
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tzlocal.unix
from conftest import CLI_TIMEOUT_S, DETECT_PORTS, NO_SERVER_PORT
from support.fake_openai import FakeOpenAI

KEY = "sk-init-secret-0123456789"


def clean_env(home: Path) -> dict[str, str]:
    """The test's environment without backthink or OpenAI variables, HOME in a temp folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "STATE_DIRECTORY"):
        env.pop(name, None)
    env["HOME"] = str(home)
    env[DETECT_PORTS] = NO_SERVER_PORT
    return env


def backthink(
    *args: str, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `backthink ARGS` as a real process, without --config."""
    return subprocess.run(
        [sys.executable, "-m", "backthink", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home folder."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def init_flags(fake: FakeOpenAI, *more: str) -> list[str]:
    return [
        "init",
        "--non-interactive",
        "--base-url",
        fake.base_url,
        "--model",
        "fake-model",
        "--timezone",
        "Asia/Shanghai",
        "--language",
        "en",
        *more,
    ]


def test_init_writes_config_and_key_apart_then_checks(
    home: Path, tmp_path: Path, fake: FakeOpenAI
) -> None:
    """The config lands in ~/.config, the key only in backthink.env (0600); check passes."""
    env = clean_env(home)
    proc = backthink(*init_flags(fake, "--api-key", KEY), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    config = home / ".config/backthink/backthink.toml"
    env_file = config.with_name("backthink.env")
    text = config.read_text(encoding="utf-8")
    assert KEY not in text and KEY not in proc.stdout + proc.stderr
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert f"BACKTHINK_MODEL__API_KEY={KEY}" in env_file.read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    state = home / ".local/state/backthink"
    assert doc["owner"]["timezone"] == "Asia/Shanghai"
    assert doc["prompt"]["language"] == "en"
    assert doc["model"] == {"base_url": fake.base_url, "name": "fake-model"}
    assert doc["database"]["url"] == f"sqlite+aiosqlite:///{state}/backthink.db"
    assert "ok  model: fake-model" in proc.stdout
    assert proc.stdout.rstrip().endswith("next: backthink service install --user")
    # The key reached the endpoint: the check's probe carried it.
    assert any(r.headers.get("authorization") == f"Bearer {KEY}" for r in fake.requests)
    # Every later command finds the config and the key from any folder.
    check = backthink("check", cwd=home, env=env)
    assert check.returncode == 0, check.stderr
    assert f"ok  config: {config}" in check.stdout


def test_init_refuses_to_overwrite(home: Path, tmp_path: Path, fake: FakeOpenAI) -> None:
    """An existing config stays unless --force; the refusal is a usage error (exit 2)."""
    env = clean_env(home)
    target = tmp_path / "mine.toml"
    target.write_text("# my own\n", encoding="utf-8")
    proc = backthink(*init_flags(fake, "--path", str(target)), cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"backthink: {target} exists: pass --force to overwrite it"
    assert target.read_text(encoding="utf-8") == "# my own\n"
    proc = backthink(*init_flags(fake, "--path", str(target), "--force"), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "api_key_env" in target.read_text(encoding="utf-8")
    # A config the lookup would not find: the next command names it.
    assert f"next: backthink --config {target} service install --user" in proc.stdout


def test_init_api_key_env_names_the_variable(home: Path, tmp_path: Path, fake: FakeOpenAI) -> None:
    """--api-key-env writes the variable's name; the key is read from it, no file is written."""
    env = dict(clean_env(home), MY_LLM_KEY=KEY)
    proc = backthink(*init_flags(fake, "--api-key-env", "MY_LLM_KEY"), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    config = home / ".config/backthink/backthink.toml"
    assert tomllib.loads(config.read_text(encoding="utf-8"))["model"]["api_key_env"] == "MY_LLM_KEY"
    assert not config.with_name("backthink.env").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--api-key", "k", "--api-key-env", "X"], "give --api-key or --api-key-env, not both"),
        (["--language", "fr"], "--language: 'fr' is not zh or en"),
        (["--timezone", "Mars/Olympus"], "owner.timezone: unknown time zone 'Mars/Olympus'"),
    ],
)
def test_init_usage_errors(
    home: Path, tmp_path: Path, fake: FakeOpenAI, flags: list[str], message: str
) -> None:
    """Bad flags are one line on stderr, exit 2, and nothing is written."""
    proc = backthink(*init_flags(fake, *flags), cwd=tmp_path, env=clean_env(home))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"backthink: {message}"
    assert not (home / ".config").exists()


def test_init_reports_a_failing_check(home: Path, tmp_path: Path) -> None:
    """Without an endpoint the config is written, the check's problem is shown, exit 1."""
    proc = backthink("init", "--non-interactive", cwd=tmp_path, env=clean_env(home))
    assert proc.returncode == 1
    assert (home / ".config/backthink/backthink.toml").is_file()
    assert "no model endpoint configured" in proc.stderr
    assert "then run: backthink check" in proc.stdout


def test_init_interactive_asks(home: Path, tmp_path: Path, fake: FakeOpenAI) -> None:
    """On a terminal init asks for what the flags left out (here fed on stdin through a pty).

    The key's question reads the controlling terminal, which a test child has none of:
    the key comes by name here.
    """
    pty = pytest.importorskip("pty")
    env = dict(clean_env(home), MY_LLM_KEY=KEY)
    answers = f"{fake.base_url}\nfake-model\nEurope/Berlin\nzh\n"
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "backthink", "init", "--api-key-env", "MY_LLM_KEY"],
            cwd=tmp_path,
            env=env,
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(leader, answers.encode())
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0, out + err
    config = home / ".config/backthink/backthink.toml"
    doc = tomllib.loads(config.read_text(encoding="utf-8"))
    assert (doc["owner"]["timezone"], doc["prompt"]["language"]) == ("Europe/Berlin", "zh")
    assert doc["model"]["base_url"] == fake.base_url
    assert "ok  model: fake-model" in out


def test_init_detect_finds_a_local_server_and_its_model(
    home: Path, tmp_path: Path, fake: FakeOpenAI
) -> None:
    """init --detect asks this machine's model servers and writes the first one found."""
    env = dict(clean_env(home), **{DETECT_PORTS: f"{NO_SERVER_PORT} {fake.port}"})
    proc = backthink("init", "--non-interactive", "--detect", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"found a model server at {fake.base_url}: fake-model" in proc.stdout
    doc = tomllib.loads((home / ".config/backthink/backthink.toml").read_text(encoding="utf-8"))
    assert doc["model"]["base_url"] == fake.base_url
    assert doc["model"]["name"] == "fake-model"
    assert "ok  model: fake-model" in proc.stdout


def test_check_names_a_local_server_when_the_configured_one_is_silent(
    home: Path, tmp_path: Path, fake: FakeOpenAI
) -> None:
    """A configured endpoint that does not answer: check names the server that does."""
    env = dict(clean_env(home), **{DETECT_PORTS: str(fake.port)})
    flags = ["init", "--non-interactive", "--base-url", "http://127.0.0.1:9/v1"]
    proc = backthink(*flags, cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert f"a model server answers at {fake.base_url}, model 'fake-model'" in proc.stderr
    assert "backthink init --detect" in proc.stderr


def test_configs_written_elsewhere_keep_their_own_data(home: Path, tmp_path: Path) -> None:
    """Two init --path configs never share a database; --data names the folder outright."""
    env = clean_env(home)
    for name in ("a", "b"):
        flags = ["init", "--non-interactive", "--path", str(tmp_path / f"{name}.toml")]
        backthink(*flags, cwd=tmp_path, env=env)
    urls = {
        name: tomllib.loads((tmp_path / f"{name}.toml").read_text(encoding="utf-8"))["database"]
        for name in ("a", "b")
    }
    assert urls["a"]["url"] == f"sqlite+aiosqlite:///{tmp_path / 'a-data'}/backthink.db"
    assert urls["b"]["url"] == f"sqlite+aiosqlite:///{tmp_path / 'b-data'}/backthink.db"
    flags = ["init", "--non-interactive", "--path", str(tmp_path / "c.toml")]
    backthink(*flags, "--data", str(tmp_path / "shared"), cwd=tmp_path, env=env)
    text = (tmp_path / "c.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text)["daemon"]["socket"] == str(tmp_path / "shared/backthink.sock")


# --- the local time zone --------------------------------------------------------------


def zone_file(name: str) -> bytes:
    """The compiled zone `name` from the tzdata package, not from this machine."""
    return importlib.resources.files("tzdata").joinpath("zoneinfo", *name.split("/")).read_bytes()


def fake_root(tmp_path: Path, *, link: str | None = None, etc_timezone: str | None = None) -> Path:
    """A root folder whose /etc/localtime links to `link` and /etc/timezone says `etc_timezone`."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    if etc_timezone is not None:
        (root / "etc/timezone").write_text(etc_timezone + "\n", encoding="ascii")
    if link is not None:
        target = root / "usr/share/zoneinfo" / link
        target.parent.mkdir(parents=True)
        target.write_bytes(zone_file(link))
        (root / "etc/localtime").symlink_to(os.path.relpath(target, root / "etc"))
    return root


def zone_under(root: Path) -> str:
    """What init would write as the time zone of a machine whose files are under `root`."""
    from backthink.config.starter import local_timezone

    return local_timezone(functools.partial(tzlocal.unix._get_localzone_name, _root=str(root)))


@pytest.mark.parametrize(
    ("link", "etc_timezone", "zone"),
    [
        ("Asia/Shanghai", "Europe/London", "Asia/Shanghai"),
        ("Asia/Shanghai", "Asia/Shanghai", "Asia/Shanghai"),
        (None, "Europe/London", "Europe/London"),
        ("Etc/UTC", None, "UTC"),
        (None, "Mars/Olympus", "UTC"),
        (None, None, "UTC"),
    ],
)
def test_the_localtime_link_wins_over_a_stale_etc_timezone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    link: str | None,
    etc_timezone: str | None,
    zone: str,
) -> None:
    """The /etc/localtime link names the zone before /etc/timezone; nothing known is UTC."""
    monkeypatch.delenv("TZ", raising=False)
    assert zone_under(fake_root(tmp_path, link=link, etc_timezone=etc_timezone)) == zone


@pytest.mark.parametrize("tz", ["Europe/Berlin", "FILE"])
def test_init_takes_the_zone_from_tz(home: Path, tmp_path: Path, tz: str) -> None:
    """$TZ, a zone name or a zone file's path, is the zone init writes, whatever the machine's."""
    if tz == "FILE":
        path = tmp_path / "zones/Europe/Berlin"
        path.parent.mkdir(parents=True)
        path.write_bytes(zone_file("Europe/Berlin"))
        tz = f":{path}"
    env = dict(clean_env(home), TZ=tz)
    proc = backthink("init", "--non-interactive", cwd=tmp_path, env=env)
    config = home / ".config/backthink/backthink.toml"
    assert config.is_file(), proc.stderr
    assert tomllib.loads(config.read_text(encoding="utf-8"))["owner"]["timezone"] == "Europe/Berlin"
