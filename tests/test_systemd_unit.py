"""The units `backthink service install` writes: they verify, and the system one keeps
its exposure low."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from backthink.config.shipped import Scope
from backthink.host.unit import plan_install

# The unit files as written: no hour or zone of the machine changes them.
pytestmark = pytest.mark.hourless

EXPOSURE_THRESHOLD = 20  # systemd's scale of 0-100; 20 is shown as an exposure of 2.0
SYSTEM_CONFIG = Path("/etc/backthink/backthink.toml")

analyze = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(analyze is None, reason="systemd-analyze is not installed")


def rendered(scope: Scope, tmp_path: Path) -> Path:
    """The unit as installing it would write it, saved in a temp folder."""
    config = SYSTEM_CONFIG if scope == "system" else tmp_path / "backthink.toml"
    path = tmp_path / "backthink.service"
    path.write_text(plan_install(scope, config, {"HOME": str(tmp_path)}).unit_text)
    return path


def service_section(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path, encoding="utf-8")
    return parser["Service"]


@pytest.mark.parametrize("scope", ["user", "system"])
def test_unit_essentials(scope: Scope, tmp_path: Path) -> None:
    """Type=notify with a watchdog, restart on failure, secrets only through EnvironmentFile=."""
    service = service_section(rendered(scope, tmp_path))
    assert service["Type"] == "notify"
    assert service["WatchdogSec"] == "60s"
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes"
    assert service["StateDirectory"] == "backthink"
    assert service["ExecStart"].endswith(" run")
    assert service["EnvironmentFile"].startswith("-/")
    assert "API_KEY" not in rendered(scope, tmp_path).read_text(encoding="utf-8")
    if scope == "system":
        assert service["ProtectSystem"] == "strict"
        assert service["CapabilityBoundingSet"] == ""
        assert service["DynamicUser"] == "yes"
    assert (ROOT / f"systemd/backthink.{scope}.service").resolve().is_file()


@needs_analyze
@pytest.mark.parametrize("scope", ["user", "system"])
def test_systemd_analyze_verify(scope: Scope, tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing wrong with the unit."""
    proc = subprocess.run(
        [str(analyze), "verify", str(rendered(scope, tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "backthink.service" not in proc.stderr, proc.stderr


@needs_analyze
def test_systemd_analyze_security(tmp_path: Path) -> None:
    """The system unit's offline security analysis stays under the exposure threshold."""
    proc = subprocess.run(
        [
            str(analyze),
            "security",
            "--offline=yes",
            f"--threshold={EXPOSURE_THRESHOLD}",
            str(rendered("system", tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    match = re.search(r"Overall exposure level for backthink\.service: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    print(f"exposure {match.group(1)}")
    assert proc.returncode == 0, f"exposure {match.group(1)} is above {EXPOSURE_THRESHOLD / 10}"
    assert float(match.group(1)) <= EXPOSURE_THRESHOLD / 10
