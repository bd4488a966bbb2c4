"""`backthink service`: the unit it writes, the commands it runs, and what it reports.

No test touches the real systemd: a fake `systemctl` and `loginctl` on PATH log
their arguments, or `--dry-run` runs nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_init import backthink, clean_env

FAKE_CTL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$*" in
  *is-active*) echo active ;;
  *show-user*) echo "${FAKE_LINGER:-no}" ;;
  *enable-linger*) [ -n "$FAKE_LINGER_REFUSED" ] && { echo "Access denied" >&2; exit 1; } ;;
  *daemon-reload*) [ -n "$FAKE_NO_BUS" ] && {
      echo "Failed to connect to bus: No medium found" >&2; exit 1; } ;;
esac
exit 0
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """A home with a config, and PATH holding fake systemctl and loginctl (and python)."""
    home = tmp_path / "home"
    config = home / ".config/backthink/backthink.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[owner]\nid = "o"\n[model]\nbase_url = "http://127.0.0.1:9/v1"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("systemctl", "loginctl"):
        (bin_dir / name).write_text(FAKE_CTL, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "ctl.log"
    env = dict(clean_env(home), PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_LOG=str(log))
    return env, config, log


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_dry_run_prints_unit_and_commands_and_changes_nothing(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """--dry-run prints this installation's unit and the commands; nothing runs or is written."""
    env, config, log = setup
    proc = backthink("service", "install", "--user", "--dry-run", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    unit = Path(env["HOME"]) / ".config/systemd/user/backthink.service"
    assert proc.stdout.startswith(f"# config: {config}\n# {unit}\n")
    script = Path(sys.executable).with_name("backthink")
    assert f"ExecStart={script} --config {config} run\n" in proc.stdout
    assert f"EnvironmentFile=-{config.with_name('backthink.env')}\n" in proc.stdout
    assert "Type=notify\n" in proc.stdout and "WatchdogSec=60s\n" in proc.stdout
    assert proc.stdout.endswith(
        "# would run:\nsystemctl --user daemon-reload\n"
        "systemctl --user enable --now backthink.service\n"
        f"loginctl enable-linger {os.environ.get('USER') or _me()}  # only when lingering is off:"
        " without it the service stops at logout and does not start at boot\n"
    )
    assert not unit.exists()
    assert calls(log) == []


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def test_install_writes_unit_reloads_enables_and_turns_on_lingering(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """Install writes the unit, runs daemon-reload and enable --now, and enables linger."""
    env, config, log = setup
    proc = backthink("service", "install", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    unit = Path(env["HOME"]) / ".config/systemd/user/backthink.service"
    assert f"--config {config} run" in unit.read_text(encoding="utf-8")
    me = _me()
    assert calls(log) == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now backthink.service",
        f"loginctl show-user {me} --property=Linger --value",
        f"loginctl enable-linger {me}",
    ]
    assert f"turned lingering on for {me}" in proc.stdout


def test_install_says_what_to_run_when_linger_is_refused(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """A refused enable-linger ends with the exact command to run."""
    env, _, _ = setup
    env["FAKE_LINGER_REFUSED"] = "1"
    proc = backthink("service", "install", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"run `sudo loginctl enable-linger {_me()}`" in proc.stdout


def test_linger_already_on_is_left_alone(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """With lingering on, nothing more is asked of loginctl."""
    env, _, log = setup
    env["FAKE_LINGER"] = "yes"
    proc = backthink("service", "install", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not any("enable-linger" in line for line in calls(log))


def test_no_systemctl_prints_the_unit_and_a_note(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """A host without systemctl gets the unit on stdout, a clear note, exit 1."""
    env, _, _ = setup
    empty = tmp_path / "empty"
    empty.mkdir()
    env["PATH"] = str(empty)
    proc = backthink("service", "install", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert "[Service]" in proc.stdout
    assert "systemctl not found: this host does not run systemd, so nothing was installed" in (
        proc.stderr
    )


def test_status_json_and_uninstall(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """status --json shows installed, active and the daemon's status; uninstall removes it."""
    env, _, log = setup
    unit = Path(env["HOME"]) / ".config/systemd/user/backthink.service"
    assert backthink("service", "install", "--user", cwd=tmp_path, env=env).returncode == 0
    proc = backthink("service", "status", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["installed"], doc["active"], doc["unit_path"]) == (True, True, str(unit))
    assert doc["daemon"]["running"] is False
    assert doc["daemon"]["last_round"] is None
    log.unlink()
    proc = backthink("service", "uninstall", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not unit.exists()
    assert calls(log) == [
        "systemctl --user disable --now backthink.service",
        "systemctl --user daemon-reload",
    ]
    doc = json.loads(
        backthink("service", "status", "--json", "--user", cwd=tmp_path, env=env).stdout
    )
    assert doc["installed"] is False


def test_install_without_a_config_points_at_init(tmp_path: Path) -> None:
    """No config anywhere: a usage error that names `backthink init`."""
    env = clean_env(tmp_path / "nobody")
    proc = backthink("service", "install", "--user", "--dry-run", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert "write one with `backthink init`" in proc.stderr


def test_system_unit_refuses_paths_it_cannot_see() -> None:
    """The system unit hides home folders: a config there is refused up front."""
    from backthink.errors import InputError
    from backthink.host.unit import plan_install

    with pytest.raises(InputError, match="the system service cannot see"):
        plan_install("system", Path("/home/a/backthink.toml"), {})


def test_install_without_a_user_bus_says_so_and_leaves_nothing(
    setup: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    """No usable systemd: one line, the unit removed again, the foreground command named."""
    env, config, _ = setup
    env["FAKE_NO_BUS"] = "1"
    proc = backthink("service", "install", "--user", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "systemd cannot run the service here" in line and "Failed to connect to bus" in line
    assert f"--config {config} run" in line
    unit = Path(env["HOME"]) / ".config/systemd/user/backthink.service"
    assert not unit.exists()
    status = json.loads(backthink("service", "status", "--json", cwd=tmp_path, env=env).stdout)
    assert status["installed"] is False
