"""What a newcomer meets on the first day: the version, plain answers to plain mistakes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import structlog
from conftest import DaemonProcess, Workdir, home_changed
from support.api_rig import WAIT_S, open_rig
from support.fake_openai import FakeOpenAI

from backthink.config import Settings
from backthink.errors import ModelError
from backthink.host.checks import CheckError, run_checks
from backthink.host.live import LiveStatus
from backthink.host.status import Status
from backthink.models import Outcome
from backthink.round.pause import PauseState
from backthink.testing import ScriptedModel, make_rig

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


def checks_settings(fake: FakeOpenAI, tmp_path: Path, **extra: Any) -> Settings:
    """A config that passes every check, with `extra` sections laid over it."""
    return Settings.model_validate(
        {
            "model": {"base_url": fake.base_url, "name": "fake-model", "max_retries": 0},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"},
            "tools": {"enabled": False},
            **extra,
        }
    )


async def checked_lines(settings: Settings) -> tuple[list[str], str | None]:
    """Every line `check` prints, and its final problem (None when it passed)."""
    lines: list[str] = []
    try:
        async for checked in run_checks(settings):
            lines.append(str(checked))
    except CheckError as exc:
        return lines, str(exc)
    return lines, None


async def test_check_warns_on_a_model_the_server_does_not_list(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """A model name the endpoint does not list passes with a warning naming what it lists."""
    settings = checks_settings(fake, tmp_path)
    settings = settings.model_copy(
        update={"model": settings.model.model_copy(update={"name": "fake-modle"})}
    )
    lines, problem = await checked_lines(settings)
    assert problem is None
    [model] = [line for line in lines if "model:" in line]
    assert model.startswith("warn model: fake-modle at ")
    assert "'fake-modle' is not listed (it lists 'fake-model')" in model


async def test_a_bad_channel_is_a_channel_problem_and_the_other_checks_still_run(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """A URL apprise cannot use fails under channels; the other checks still run."""
    settings = checks_settings(
        fake,
        tmp_path,
        channels={"web": {"type": "web"}, "phone": {"type": "apprise", "url": "nosuch://x"}},
    )
    lines, problem = await checked_lines(settings)
    assert problem is not None and problem.startswith("channels: phone (apprise)")
    assert [line.split(":")[0] for line in lines] == [
        "ok  prompts",
        "ok  channels",
        "FAIL channels",
        "ok  database",
        "ok  model",
    ]


async def test_check_warns_on_a_webhook_without_a_secret(fake: FakeOpenAI, tmp_path: Path) -> None:
    """A webhook that would post unsigned passes with a warning that says how to sign it."""
    hook = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    lines, problem = await checked_lines(checks_settings(fake, tmp_path, channels={"hook": hook}))
    assert problem is None
    assert "warn channels: hook (webhook): posts unsigned; set secret" in "\n".join(lines)
    signed = {**hook, "secret": "s3cret"}
    lines, _ = await checked_lines(checks_settings(fake, tmp_path, channels={"hook": signed}))
    assert "ok  channels: hook (webhook)" in lines


def test_a_checkout_config_that_hides_the_users_is_named(tmp_path: Path) -> None:
    """Inside a checkout, status, check and service install say which config they read and why."""
    checkout = tmp_path / "clone"
    (checkout / "config").mkdir(parents=True)
    ours = checkout / "config" / "backthink.toml"
    ours.write_text('[gate]\nquiet_hours = ""\n', encoding="utf-8")
    mine = Path(os.environ["XDG_CONFIG_HOME"]) / "backthink" / "backthink.toml"
    mine.parent.mkdir(parents=True)
    mine.write_text('[gate]\nquiet_hours = ""\n', encoding="utf-8")
    status = backthink("status", cwd=checkout)
    assert status.stdout.splitlines()[0] == f"config: {ours}"
    note = f"note: reading this checkout's {ours}, not your {mine}"
    assert note in status.stderr
    assert f"pass --config {mine} to use yours" in status.stderr
    check = backthink("check", cwd=checkout)
    assert f"ok  config: {ours}" in check.stdout
    assert note in check.stderr
    install = backthink("service", "install", "--user", "--dry-run", cwd=checkout)
    assert install.stdout.splitlines()[0] == f"# config: {ours}"
    assert note in install.stderr
    # Outside the checkout the user's own file is read, with nothing to note.
    elsewhere = backthink("status", cwd=tmp_path)
    assert elsewhere.stdout.splitlines()[0] == f"config: {mine}"
    assert "note:" not in elsewhere.stderr


def test_the_real_home_guard_names_the_files_and_allows_an_outside_writer(tmp_path: Path) -> None:
    """The suite's guard names what changed and says a daemon outside the suite may be why."""
    folder = tmp_path / "state" / "backthink"
    db = str(folder / "backthink.db")
    assert home_changed(folder, {db: 1.0}, {db: 1.0}) is None
    problem = home_changed(folder, {db: 1.0}, {db: 2.0, db + "-wal": 2.0})
    assert problem is not None
    assert f"{db}, {db}-wal" in problem
    assert "your own backthink daemon" in problem


@pytest.mark.slow
def test_daemon_started_lists_the_configured_channels(workdir: Workdir) -> None:
    """With the API on and no client yet, the start line names every channel; status says why."""
    workdir.write_config(
        '[api]\nlisten = "127.0.0.1:0"\n'
        '[channels.web]\ntype = "web"\n'
        '[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\n'
        "[schedule]\nstartup_greeting = false\n"
    )
    daemon = DaemonProcess(workdir, dict(workdir.env))
    try:
        started = daemon.wait_for("daemon.started")
        daemon.wait_for("daemon.ready")
        status = workdir.cli("status").stdout
    finally:
        daemon.stop()
    assert started["channels"] == ["web", "hook"]
    assert started["connected"] == ["hook"]
    # No client reads the session yet: status says so, not that the channel is down.
    [channels] = [line for line in status.splitlines() if line.startswith("channels")]
    assert "web unwatched (no client reads the session now" in channels
    assert "hook ok" in channels


async def test_a_failed_round_logs_its_line_as_a_warning() -> None:
    """round.finished of a failed round is a warning; a round that stayed silent stays info."""
    settings = Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "gate": {"default_channel": "web", "quiet_hours": ""},
            "schedule": {"skip_unchanged": False},
        }
    )
    rig = make_rig(settings, model=ScriptedModel(ModelError("boom"), "[我决定:no_push]"))
    with structlog.testing.capture_logs() as logs:
        failed = await rig.thinker.run_round("o", "heartbeat")
        silent = await rig.thinker.run_round("o", "heartbeat")
    assert (failed.outcome, silent.outcome) == (Outcome.FAILED, Outcome.SUPPRESSED)
    levels = [e["log_level"] for e in logs if e["event"] == "round.finished"]
    assert levels == ["warning", "info"]


@pytest.mark.slow
def test_a_greeting_the_endpoint_never_answered_waits_for_the_next_start(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """A typo in the model's URL fails the greeting; after the fix, the next start greets."""
    fake.default_reply = "[我决定:push]\n早上好，今天也一起加油。"
    wrong = dict(
        daemon_env,
        BACKTHINK_MODEL__BASE_URL="http://127.0.0.1:9/v1",
        BACKTHINK_SCHEDULE__HEARTBEAT="1h",
    )
    daemon = DaemonProcess(workdir, wrong)
    try:
        failed = daemon.wait_for("round.finished")
        assert (failed["trigger"], failed["outcome"], failed["reason"]) == (
            "startup",
            "failed",
            "model_error",
        )
        assert daemon.wait_for("daemon.greeting_waits")["reason"] == "model_error"
    finally:
        assert daemon.stop() == 0
    daemon = DaemonProcess(workdir, dict(daemon_env, BACKTHINK_SCHEDULE__HEARTBEAT="1h"))
    try:
        greeting = daemon.wait_for("round.finished")
        assert (greeting["trigger"], greeting["outcome"]) == ("startup", "delivered")
    finally:
        assert daemon.stop() == 0
    assert "daemon.greeting_skipped" not in "".join(daemon.raw)


async def test_a_dead_upstream_is_named_and_its_call_logged_as_a_warning(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """A relay call to an upstream nothing answers says which upstream, and warns in the log."""
    dead = "http://127.0.0.1:9/v1"
    async with open_rig(tmp_path, fake, relay={"upstream": dead}) as rig:
        with structlog.testing.capture_logs() as logs:
            async with rig.client() as c:
                body = {"model": "m", "messages": [{"role": "user", "content": "在吗"}]}
                answer = await c.post("/v1/chat/completions", json=body)
            await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
        summary = rig.fleet.turns.relay_summary("o")
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert message.startswith(f"the upstream {dead} cannot be reached")
    (finished,) = [e for e in logs if e["event"] == "relay.finished"]
    assert finished["log_level"] == "warning" and finished["status"] is None
    # What status shows of it, through the daemon's socket answer.
    assert summary == {"calls": 1, "failed": 1, "last_error": message}
    live = LiveStatus.from_json(LiveStatus(relay=summary).to_json())
    shown = Status(
        running=True,
        pause=PauseState(paused=False),
        next_heartbeat=None,
        last_round=None,
        pending_deliveries=0,
        relay=live.relay,
    ).render(ZoneInfo("UTC"))
    assert f"relay       1 call since the daemon started, 1 failed; the last: {message}" in shown


async def test_an_unknown_query_parameter_is_refused_as_an_unknown_body_key_is(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """GET /v1/messages?limt=5 is a 400 naming the parameter, not a page of 50."""
    async with open_rig(tmp_path, fake) as rig, rig.client() as c:
        typo = await c.get("/v1/messages", params={"limt": "5"})
        fine = await c.get("/v1/messages", params={"limit": "5", "all": "1"})
    assert typo.status_code == 400
    assert typo.json()["error"].startswith("'limt': unknown query parameter")
    assert fine.status_code == 200
