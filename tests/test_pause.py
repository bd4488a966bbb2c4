"""Pause, resume and status: a stored pause skips every round before any model call."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI

from backthink.config import Settings
from backthink.errors import InputError
from backthink.host import poke
from backthink.host.live import LiveStatus
from backthink.models import Outcome, Reason
from backthink.round.pause import FOREVER, Pauses, PauseState, parse_pause_duration, pause_state
from backthink.store import SqlMarks, open_store
from backthink.testing import FakeClock, ScriptedModel, make_rig

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
NO_PUSH = "[我决定:no_push]"
TIMEOUT_S = 20.0  # seconds for any one exchange on a loaded machine


def settings() -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "prompt": {"dir": str(PROMPTS)},
            "gate": {"quiet_hours": "", "activity_window": "10m"},
            # Every heartbeat asks the model here; skipping unchanged ones is test_unchanged.py's.
            "schedule": {"skip_unchanged": False},
        }
    )


@pytest.mark.parametrize(
    ("marked", "expected"),
    [
        (None, PauseState(paused=False)),
        (T0 - timedelta(seconds=1), PauseState(paused=False)),
        (T0, PauseState(paused=False)),
        (T0 + timedelta(seconds=1), PauseState(paused=True, until=T0 + timedelta(seconds=1))),
        (FOREVER, PauseState(paused=True, until=None)),
    ],
)
def test_a_stored_pause_holds_only_before_its_end(
    marked: datetime | None, expected: PauseState
) -> None:
    """A pause ends at its stored instant; the far-future mark means until resumed."""
    assert pause_state(marked, T0) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30m", timedelta(minutes=30)), ("1h30m", timedelta(minutes=90)), ("1d", timedelta(days=1))],
)
def test_pause_durations_use_the_config_syntax(text: str, expected: timedelta) -> None:
    """--for reads durations exactly as the config does."""
    assert parse_pause_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "0s",
        "0",
        "-5m",
        "abc",
        "5x",
        "nan",
        "inf",
        "1e9d",
        "9" * 400 + "d",
        "400d",
        "2h;rm",
    ],
)
def test_bad_pause_durations_are_input_errors(text: str) -> None:
    """Anything but a positive duration up to a year is refused with one line."""
    with pytest.raises(InputError, match=r"^pause --for: ") as caught:
        parse_pause_duration(text)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 120


@pytest.mark.parametrize("trigger", ["heartbeat", "startup", "cron", "日程：组会"])
async def test_a_paused_round_is_skipped_disabled_without_a_model_call(trigger: str) -> None:
    """Every trigger of a paused owner ends skipped/disabled, recorded, with no tokens spent."""
    model = ScriptedModel()
    rig = make_rig(settings(), model=model, clock=FakeClock(T0))
    await Pauses(rig.marks).pause("o", at=T0, length=None)
    record = await rig.thinker.run_round("o", trigger)
    assert (record.outcome, record.reason) == (Outcome.SKIPPED, Reason.DISABLED)
    assert record.prompt_tokens is None and model.calls == []
    assert record.notes == ["paused until resumed"]
    assert [r.id for r in await rig.rounds.list()] == [record.id]


async def test_a_pause_for_a_while_ends_by_itself_and_resume_ends_it_early() -> None:
    """A timed pause lets rounds run once it has passed; resume ends a pause at once."""
    model = ScriptedModel(NO_PUSH, NO_PUSH)
    clock = FakeClock(T0)
    rig = make_rig(settings(), model=model, clock=clock)
    pauses = Pauses(rig.marks)
    held = await pauses.pause("o", at=T0, length=timedelta(hours=2))
    assert held == PauseState(paused=True, until=T0 + timedelta(hours=2))
    clock.advance(timedelta(hours=1, minutes=59))
    assert (await rig.thinker.run_round("o", "heartbeat")).reason == Reason.DISABLED
    clock.advance(timedelta(minutes=1))
    assert (await rig.thinker.run_round("o", "heartbeat")).reason == Reason.NO_PUSH

    await pauses.pause("o", at=clock.now(), length=None)
    assert (await rig.thinker.run_round("o", "heartbeat")).reason == Reason.DISABLED
    assert (await pauses.resume("o", at=clock.now())).paused is True
    assert (await rig.thinker.run_round("o", "heartbeat")).reason == Reason.NO_PUSH
    assert (await pauses.resume("o", at=clock.now())).paused is False
    model.assert_complete()


async def test_a_pause_belongs_to_one_owner() -> None:
    """Pausing one owner leaves another owner's rounds alone."""
    rig = make_rig(settings(), model=ScriptedModel(NO_PUSH), clock=FakeClock(T0))
    await Pauses(rig.marks).pause("someone-else", at=T0, length=None)
    assert (await rig.thinker.run_round("o", "heartbeat")).reason == Reason.NO_PUSH


async def test_the_socket_answers_status_requests_without_a_round(tmp_path: Path) -> None:
    """A status request gets the daemon's view; unknown owners and dead sockets get None."""
    path = tmp_path / "bt.sock"
    assert await poke.ask_status(path, owner_id=None, timeout_s=TIMEOUT_S) is None
    asked: list[str] = []

    def status(owner_id: str) -> LiveStatus:
        asked.append(owner_id)
        return LiveStatus(T0, {"web": "ok"})

    async def no_round(owner_id: str, trigger: str) -> Any:
        raise AssertionError("a status request must not run a round")

    server = await poke.serve(path, no_round, ["o", "p"], status=status)
    try:
        answer = await poke.ask_status(path, owner_id="p", timeout_s=TIMEOUT_S)
        assert answer == {
            "running": True,
            "next_heartbeat": T0.isoformat(),
            "channels": {"web": "ok"},
        }
        assert await poke.ask_status(path, owner_id="evil", timeout_s=TIMEOUT_S) is None
        assert asked == ["p"]
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), TIMEOUT_S)


# --- the command line and the daemon, as real processes ---------------------------


@pytest.fixture
def cli(workdir: Workdir, fake: FakeOpenAI) -> Workdir:
    """The working folder, its rounds answering no_push."""
    fake.default_reply = NO_PUSH
    # Recall is about memory, not pausing; these rounds need only the window.
    workdir.env["BACKTHINK_MEMORY__RECALL"] = "0"
    workdir.env["BACKTHINK_DAEMON__SOCKET"] = str(workdir.path / "bt.sock")
    return workdir


def status(workdir: Workdir) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(workdir.cli("status", "--json").stdout)
    return result


def test_pause_then_think_is_skipped_disabled_with_no_model_request(
    cli: Workdir, fake: FakeOpenAI
) -> None:
    """pause holds for think too: the round is recorded skipped/disabled, the model never asked."""
    out = cli.cli("pause").stdout
    assert out == "paused until resumed: every round is skipped until `backthink resume`\n"
    skipped = cli.think_json("--trigger", "startup")
    assert (skipped["outcome"], skipped["reason"]) == ("skipped", "disabled")
    assert fake.chat_requests == []
    rounds = json.loads(cli.cli("rounds", "--json").stdout)
    assert [(r["round_id"], r["reason"], r["prompt_tokens"]) for r in rounds] == [
        (skipped["round_id"], "disabled", None)
    ]

    assert cli.cli("resume").stdout == "resumed: rounds run again\n"
    assert cli.think_json()["reason"] == "no_push"
    assert len(fake.chat_requests) == 1
    assert cli.cli("resume").stdout == "not paused: rounds run as usual\n"


def test_pause_for_a_second_ends_by_itself(cli: Workdir, fake: FakeOpenAI) -> None:
    """pause --for 1s names its end in the owner's zone, and rounds run again once it passed."""
    out = cli.cli("pause", "--for", "1s").stdout
    assert out.startswith("paused until 20") and " CST: every round is skipped until then" in out
    deadline = time.monotonic() + TIMEOUT_S
    while status(cli)["paused"]:
        assert time.monotonic() < deadline, "the pause did not end"
        time.sleep(0.2)
    assert cli.think_json()["reason"] == "no_push"
    assert len(fake.chat_requests) == 1


def test_a_pause_whose_end_is_stored_in_the_past_is_no_pause(
    cli: Workdir, fake: FakeOpenAI
) -> None:
    """A pause that ended an hour ago, written by any process, lets the round think."""

    async def paused_earlier() -> None:
        db, _, _ = await open_store(f"sqlite+aiosqlite:///{cli.path / 'bt.db'}")
        try:
            start = datetime.now(UTC) - timedelta(hours=2)
            await Pauses(SqlMarks(db)).pause("o", at=start, length=timedelta(hours=1))
        finally:
            await db.dispose()

    asyncio.run(paused_earlier())
    doc = status(cli)
    assert (doc["paused"], doc["paused_until"]) == (False, None)
    assert cli.think_json()["reason"] == "no_push"


def test_a_bad_duration_is_one_line_and_exit_2(cli: Workdir) -> None:
    """A duration that cannot be a pause exits 2 with one line on stderr, and pauses nothing."""
    # Every refused form is pinned down above; here, what a user of the command sees.
    for bad in ("0s", "1e400"):
        proc = cli.cli("pause", "--for", bad, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("backthink: pause --for: ") and proc.stderr.count("\n") == 1
    assert status(cli)["paused"] is False


def test_status_without_a_daemon(cli: Workdir, fake: FakeOpenAI) -> None:
    """With no daemon: not running, no next heartbeat, the stored pause and last round."""
    assert status(cli) == {
        "running": False,
        "paused": False,
        "paused_until": None,
        "next_heartbeat": None,
        "last_round": None,
        "pending_deliveries": 0,
        "channels": {"web": "ok"},
        "model": "ok",
        "disk": "ok",
        "turns_in_flight": {"rounds": 0, "relay": 0},
    }
    cli.think_json()
    cli.cli("pause", "--for", "2h")
    doc = status(cli)
    assert doc["last_round"]["outcome"] == "suppressed"
    assert doc["last_round"]["reason"] == "no_push"
    assert datetime.fromisoformat(doc["last_round"]["at"]).utcoffset() == timedelta(0)
    until = datetime.fromisoformat(doc["paused_until"])
    assert doc["paused"] is True
    assert timedelta(hours=1, minutes=59) < until - datetime.now(UTC) <= timedelta(hours=2)
    text = cli.cli("status").stdout
    assert "daemon      not running" in text and "paused until 20" in text
    assert "suppressed / no_push" in text and "model       ok" in text
    assert "sk-test-secret" not in text + json.dumps(doc)
    docs = Path(__file__).resolve().parent.parent / "docs/running.md"
    example = json.loads(
        docs.read_text(encoding="utf-8")
        .split("`backthink status --json` one object")[1]
        .split("```")[1][4:]
    )
    assert list(example) == list(doc) and list(example["last_round"]) == list(doc["last_round"])


def test_status_says_when_the_model_is_unreachable_and_never_hangs(cli: Workdir) -> None:
    """A model endpoint that refuses connections reads "unreachable: …", quickly, exit 0."""
    cli.env["BACKTHINK_MODEL__BASE_URL"] = "http://127.0.0.1:9/v1"
    started = time.monotonic()
    doc = status(cli)
    assert doc["model"].startswith("unreachable: ")
    assert time.monotonic() - started < TIMEOUT_S
    del cli.env["BACKTHINK_MODEL__BASE_URL"]
    assert status(cli)["model"] == "not configured"


@pytest.mark.timeout(150)  # two daemon starts and five commands: slow on a loaded machine
def test_a_pause_holds_across_restarts_and_resume_reaches_the_running_daemon(
    cli: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """Paused before start: every round of two daemon runs is skipped; resume is seen live."""
    env = dict(daemon_env, BACKTHINK_MEMORY__RECALL="0")
    cli.env = env
    cli.cli("pause")
    for run in range(2):
        daemon = DaemonProcess(cli, env)
        try:
            daemon.wait_for("daemon.ready")
            finished = daemon.wait_for("round.finished", count=2 if run else 1)
            assert (finished["outcome"], finished["reason"]) == ("skipped", "disabled")
            if run == 1:  # the first run is the restart; the rest is checked once
                doc = status(cli)
                assert doc["running"] is True and doc["paused"] is True
                assert doc["paused_until"] is None
                assert datetime.fromisoformat(doc["next_heartbeat"]).utcoffset() == timedelta(0)
                assert doc["last_round"]["reason"] == "disabled"
                assert doc["channels"] == {"web": "ok"} and doc["model"] == "ok"
                assert "running, next heartbeat 20" in cli.cli("status").stdout
                cli.cli("resume")
                count = len([e for e in daemon.seen if e.get("event") == "round.finished"])
                while daemon.wait_for("round.finished", count=count + 1)["reason"] == "disabled":
                    count += 1
        finally:
            assert daemon.stop() == 0
        if run == 0:
            assert fake.chat_requests == []
    assert len(fake.chat_requests) >= 1
    assert status(cli)["running"] is False and status(cli)["next_heartbeat"] is None
