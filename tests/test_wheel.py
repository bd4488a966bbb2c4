"""The built wheel on its own: installed in a fresh virtual environment, run from elsewhere.

The wheel's dependencies are not downloaded again: the fresh environment sees the
test environment's site-packages through a .pth line, which adds the folder to
sys.path without running its .pth files, so an editable install of the checkout
there stays out of sight. The test asserts that the package imported is the one
installed from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT
from support.fake_openai import FakeOpenAI
from test_init import clean_env

# What it adds is the packaging; its round pushes at any hour, as the other rounds show.
pytestmark = pytest.mark.hourless

BUILD_TIMEOUT_S = 300  # seconds; building may fetch setuptools into an isolated build env
KEY = "sk-wheel-secret-0123456789"
PUSH = "想起她说今天要交报告。\n[我决定:push]\n[紧急:routine]\n报告交了吗？记得歇一会儿。"


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    # The checkout on PYTHONPATH would pass for an installed backthink.
    kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout installed.

    The wheel is built from an archive of the checkout, one folder inside, as a
    download of the repository is (the README's `pipx install ./backthink-main.tar.gz`).
    """
    base = tmp_path_factory.mktemp("wheel")
    src = base / "backthink-main"
    src.mkdir()
    # Only what a wheel is built from: a stale build/ or egg-info of the checkout stays out.
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "backthink", src / "backthink", ignore=shutil.ignore_patterns("__pycache__")
    )
    archive = shutil.make_archive(str(base / "backthink-main"), "gztar", base, src.name)
    dist = base / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), archive],
        timeout=BUILD_TIMEOUT_S,
    )
    (wheel,) = dist.glob("backthink-*.whl")
    env_dir = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], timeout=120)
    python = env_dir / "bin/python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    site = Path(purelib.stdout.strip())
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        timeout=BUILD_TIMEOUT_S,
    )
    # After the install: pip would take the test environment's backthink for this one.
    (site / "reuse-test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return env_dir


@pytest.mark.slow
def test_wheel_runs_from_anywhere(venv: Path, tmp_path: Path, fake: FakeOpenAI) -> None:
    """init, check, think with the shipped prompt and a unit that verifies, all from elsewhere."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    env = clean_env(home)
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    bt = str(venv / "bin/backthink")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([*args], cwd=elsewhere, env=env, timeout=120)

    where = run(str(venv / "bin/python"), "-c", "import backthink; print(backthink.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    init = run(
        bt,
        "init",
        "--non-interactive",
        "--base-url",
        fake.base_url,
        "--model",
        "fake-model",
        "--api-key",
        KEY,
        "--timezone",
        "Asia/Shanghai",
        "--language",
        "zh",
    )
    assert "ok  prompts: shipped with the package (zh)" in init.stdout
    assert "next: backthink service install --user" in init.stdout
    check = run(bt, "check")
    assert "ok  model: fake-model" in check.stdout
    fake.reset()  # forget the checks' own requests (their tool probes)
    fake.script(PUSH)
    # The starter config has quiet hours 23:00-07:00: the round must push whatever the hour.
    env.update(BACKTHINK_GATE__QUIET_HOURS="", BACKTHINK_GATE__ACTIVITY_WINDOW="0s")
    think = json.loads(run(bt, "think", "--json").stdout)
    assert (think["outcome"], think["reason"]) == ("delivered", "web")
    guidance = (Path(where.stdout.strip()).parent / "prompts/guidance.zh.md").read_text()
    (request,) = fake.chat_requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    sent = request.body["messages"][-1]["content"]
    assert sent.startswith(guidance.strip().split("${", 1)[0]), sent[:200]
    dry = run(bt, "service", "install", "--user", "--dry-run").stdout
    unit_text = dry.split("\n", 1)[1].split("# end of unit\n", 1)[0]
    assert f"ExecStart={bt} --config {home}/.config/backthink/backthink.toml run" in unit_text
    assert KEY not in dry
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit was not verified")
    unit = tmp_path / "backthink.service"
    unit.write_text(unit_text)
    verify = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0 and "backthink.service" not in verify.stderr, verify.stderr
