"""What a newcomer meets on the first day: the version, plain answers to plain mistakes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

CLI_TIMEOUT_S = 60  # seconds for one command-line run


def backthink(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the command line as a user would, with no config found."""
    return subprocess.run(
        [sys.executable, "-m", "backthink", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    """`backthink --version` prints the distribution's version and exits 0, before any command."""
    for args in (("--version",), ("--version", "status")):
        done = backthink(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"backthink {version('backthink')}"
