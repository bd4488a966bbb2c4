"""The shipped systemd unit: it verifies, and its hardening keeps exposure low."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "systemd/backthink.service"
EXPOSURE_THRESHOLD = 20  # systemd's scale of 0-100; 20 is shown as an exposure of 2.0

analyze = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(analyze is None, reason="systemd-analyze is not installed")


def local_unit(tmp_path: Path) -> Path:
    """The unit with its install paths pointed at this checkout, so verify finds the binary."""
    text = UNIT.read_text(encoding="utf-8")
    text = text.replace(
        "/opt/backthink/.venv/bin/backthink", str(Path(sys.executable).parent / "backthink")
    )
    text = text.replace("WorkingDirectory=/opt/backthink", f"WorkingDirectory={ROOT}")
    path = tmp_path / "backthink.service"
    path.write_text(text, encoding="utf-8")
    return path


def test_unit_essentials() -> None:
    """Type=notify with a watchdog, restart on failure, and the hardening the README promises."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT, encoding="utf-8")
    service = parser["Service"]
    assert service["Type"] == "notify"
    assert service["WatchdogSec"] == "60s"
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["StateDirectory"] == "backthink"
    assert service["CapabilityBoundingSet"] == ""
    assert "SystemCallFilter" in service
    assert (ROOT / "systemd/backthink.env.example").is_file()


@needs_analyze
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing wrong with the unit."""
    proc = subprocess.run(
        [str(analyze), "verify", str(local_unit(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "backthink.service" not in proc.stderr, proc.stderr


@needs_analyze
def test_systemd_analyze_security(tmp_path: Path) -> None:
    """The offline security analysis stays under the exposure threshold."""
    proc = subprocess.run(
        [
            str(analyze),
            "security",
            "--offline=yes",
            f"--threshold={EXPOSURE_THRESHOLD}",
            str(local_unit(tmp_path)),
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
