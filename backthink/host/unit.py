"""`backthink service`: install, remove and inspect the systemd unit of this installation.

The unit is rendered from a shipped template: `ExecStart` is this installation's
`backthink` with the absolute config path, secrets come only through
`EnvironmentFile=` (`backthink.env` beside the config). A user service on a host
where the user has no lingering session would stop at logout and never start at
boot, so installing one turns lingering on, or says exactly what to run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from backthink.config import paths
from backthink.config.shipped import Scope, unit_template
from backthink.errors import BackthinkError, InputError

UNIT_NAME = "backthink.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
COMMAND_TIMEOUT_S = 60  # seconds one systemctl or loginctl call may take
# The system unit hides these (ProtectHome=yes): neither its program nor its config may live there.
HIDDEN_FROM_SYSTEM = (Path("/home"), Path("/root"), Path("/run/user"))
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")


class ServiceError(BackthinkError):
    """systemctl or loginctl failed, or this host has no systemd; the message says what to do."""


@dataclass(frozen=True)
class Plan:
    """What installing the unit means: the file, its text and the commands to run after it."""

    scope: Scope
    unit_path: Path
    unit_text: str
    commands: list[list[str]] = field(default_factory=list)


def default_scope() -> Scope:
    """root installs the system service, anyone else a user service."""
    return "system" if os.geteuid() == 0 else "user"


def unit_path(scope: Scope, env: Mapping[str, str]) -> Path:
    """`~/.config/systemd/user/backthink.service` or `/etc/systemd/system/backthink.service`."""
    if scope == "system":
        return SYSTEM_UNIT_DIR / UNIT_NAME
    return paths.user_config_path(env).parent.parent / "systemd/user" / UNIT_NAME


def systemctl(scope: Scope) -> list[str]:
    """The systemctl command line for the scope."""
    return ["systemctl", "--user"] if scope == "user" else ["systemctl"]


def program() -> list[str]:
    """How this installation's backthink is started: its script beside the interpreter."""
    # Not resolved: a virtual environment's interpreter is a link to the base one.
    script = Path(sys.executable).with_name("backthink")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "backthink"]


def quote(arg: str) -> str:
    """One argument of a unit's command line: `%` and `$` escaped, quoted when needed."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_./:=+,@%$-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(scope: Scope, *, argv: list[str], env_file: Path) -> str:
    """The unit file's text for the scope, running `argv`."""
    text = unit_template(scope)
    text = text.replace("@EXEC_START@", " ".join(quote(arg) for arg in argv))
    text = text.replace("@ENV_FILE@", quote(str(env_file)))
    left = _PLACEHOLDER.search(text)
    assert left is None, f"unit template placeholder {left.group()} not filled"
    return text


def plan_install(scope: Scope, config: Path, env: Mapping[str, str]) -> Plan:
    """Plan the unit for `config` (absolute): where it goes, its text, what to run after.

    Raises:
        InputError: the system unit could not read the program or the config.
    """
    argv = [*program(), "--config", str(config), "run"]
    if scope == "system":
        for what, path in (("backthink", Path(argv[0])), ("the config", config)):
            if any(path.is_relative_to(hidden) for hidden in HIDDEN_FROM_SYSTEM):
                raise InputError(
                    f"the system service cannot see {what} at {path} (home folders are hidden "
                    "from it): install backthink and its config outside them, e.g. a venv in "
                    "/opt/backthink and `backthink init --path /etc/backthink/backthink.toml`"
                )
    text = render_unit(scope, argv=argv, env_file=config.with_name(paths.ENV_FILE_NAME))
    ctl = systemctl(scope)
    return Plan(
        scope=scope,
        unit_path=unit_path(scope, env),
        unit_text=text,
        commands=[[*ctl, "daemon-reload"], [*ctl, "enable", "--now", UNIT_NAME]],
    )


def user_name(env: Mapping[str, str]) -> str:
    """The name of the user running this process."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return env.get("USER") or str(os.getuid())


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a systemctl or loginctl command, capturing its output.

    Raises:
        ServiceError: the program is missing or did not finish in time.
    """
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise ServiceError(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ServiceError(f"{' '.join(argv)} did not finish in {COMMAND_TIMEOUT_S} s") from None


def has_systemd() -> bool:
    """Whether systemctl is on PATH."""
    return shutil.which("systemctl") is not None


def install(plan: Plan) -> list[str]:
    """Write the unit, reload systemd and enable and start the service.

    Returns:
        One line per step done.

    Raises:
        ServiceError: a file could not be written or a command failed (its message included).
    """
    done = []
    existed = plan.unit_path.exists()
    try:
        plan.unit_path.parent.mkdir(parents=True, exist_ok=True)
        plan.unit_path.write_text(plan.unit_text, encoding="utf-8")
    except OSError as exc:
        hint = " (run it with sudo)" if plan.scope == "system" else ""
        raise ServiceError(f"cannot write {plan.unit_path}: {exc.strerror}{hint}") from None
    done.append(f"wrote {plan.unit_path}")
    for argv in plan.commands:
        try:
            _check(run(argv), argv)
        except ServiceError as exc:
            # systemd is not usable here (no user bus, a container): nothing of this
            # install is left behind to be mistaken for an installed service.
            if not existed:
                plan.unit_path.unlink(missing_ok=True)
            removed = "" if existed else f"; removed {plan.unit_path}"
            raise ServiceError(f"systemd cannot run the service here: {exc}{removed}") from None
        done.append(f"ran {' '.join(argv)}")
    return done


def _check(proc: subprocess.CompletedProcess[str], argv: list[str]) -> None:
    if proc.returncode != 0:
        problem = (proc.stderr or proc.stdout).strip().splitlines()
        detail = problem[-1] if problem else f"exit {proc.returncode}"
        raise ServiceError(f"{' '.join(argv)} failed: {detail}")


def linger_on(user: str) -> bool:
    """Whether the user's manager runs without a login session (loginctl's Linger)."""
    try:
        proc = run(["loginctl", "show-user", user, "--property=Linger", "--value"])
    except ServiceError:
        return False
    # A user with no session and no lingering is not known to logind at all: exit 1.
    return proc.returncode == 0 and proc.stdout.strip() == "yes"


def enable_linger(user: str) -> str:
    """Turn lingering on for the user, or say exactly what to run instead.

    Returns:
        One line saying what happened.
    """
    if linger_on(user):
        return f"lingering is on for {user}: the service runs with no one logged in"
    argv = ["loginctl", "enable-linger", user]
    try:
        proc = run(argv)
    except ServiceError as exc:
        return f"note: {exc}; run `sudo loginctl enable-linger {user}` so it runs after logout"
    if proc.returncode != 0:
        return (
            f"note: lingering is off for {user}, and `{' '.join(argv)}` was refused; without it "
            f"the service stops at logout and does not start at boot: run "
            f"`sudo loginctl enable-linger {user}`"
        )
    return f"turned lingering on for {user}: the service runs with no one logged in, from boot"


def uninstall(scope: Scope, env: Mapping[str, str]) -> list[str]:
    """Stop and disable the service, remove its unit and reload systemd.

    Raises:
        ServiceError: the unit could not be removed or systemd could not reload.
    """
    path = unit_path(scope, env)
    if not path.exists():
        return [f"not installed: no {path}"]
    ctl = systemctl(scope)
    done = []
    if has_systemd():
        stop = [*ctl, "disable", "--now", UNIT_NAME]
        proc = run(stop)
        # A unit systemd never loaded cannot be stopped; removing it is still right.
        done.append(f"ran {' '.join(stop)}" + ("" if proc.returncode == 0 else " (it failed)"))
    try:
        path.unlink()
    except OSError as exc:
        raise ServiceError(f"cannot remove {path}: {exc.strerror}") from None
    done.append(f"removed {path}")
    if has_systemd():
        reload = [*ctl, "daemon-reload"]
        _check(run(reload), reload)
        done.append(f"ran {' '.join(reload)}")
    return done


def is_active(scope: Scope) -> bool:
    """Whether systemd reports the service active (False without systemd)."""
    if not has_systemd():
        return False
    try:
        proc = run([*systemctl(scope), "is-active", UNIT_NAME])
    except ServiceError:
        return False
    return proc.stdout.strip() == "active"


def installed_scope(env: Mapping[str, str]) -> Scope:
    """The scope whose unit exists (the user's first), else the default one."""
    scopes: tuple[Scope, ...] = ("user", "system")
    for scope in scopes:
        if unit_path(scope, env).exists():
            return scope
    return default_scope()
