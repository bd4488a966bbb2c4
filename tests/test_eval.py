"""`backthink eval`: the shipped scenarios through the real CLI, the figures' sums, bad lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import Workdir
from hypothesis import given
from hypothesis import strategies as st
from support.fake_openai import FakeOpenAI
from support.fake_script import rough_tokens
from support.right_replies import RightReplies
from support.webhook_receiver import WebhookReceiver

from backthink.evaluation.figures import RunResult, kappa, percentile, rates, ratio
from backthink.evaluation.report import report
from backthink.evaluation.scenarios import load_scenarios
from backthink.evaluation.table import verdict
from backthink.models import Urgency

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "eval/scenarios.jsonl"
DAYS = ROOT / "eval/days.jsonl"
HOLDOUT = ROOT / "eval/holdout.jsonl"
# Every gate value the expectations below rely on, written out (the defaults of the
# design), so a change of a default never silently changes what these tests prove.
GATE: dict[str, object] = {
    "quiet_hours": "23:00-07:00",
    "quiet_mode": "critical_only",
    "activity_window": "10m",
    "min_interval": "2h",
    "daily_cap": 4,
    "max_unanswered": 2,
    "max_body_chars": 600,
    "duplicate_window": "24h",
    "default_channel": "web",
}
SH = ZoneInfo("Asia/Shanghai")


def shipped() -> list[dict[str, Any]]:
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# seconds for one `eval` of a shipped file: some 300 rounds with the baselines'.
EVAL_TIMEOUT_S = 240
# seconds for a test that runs the shipped files, on a loaded two-core machine.
SHIPPED_TEST_TIMEOUT_S = 600


def eval_json(workdir: Workdir, *args: str) -> dict[str, Any]:
    proc = workdir.cli("eval", *args, "--json", timeout_s=EVAL_TIMEOUT_S)
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


# -- the shipped set ------------------------------------------------------------


def test_the_shipped_set_is_large_bilingual_and_says_why() -> None:
    """At least 150 valid scenarios, both languages, both labels, each tagged, with its reason."""
    loaded = load_scenarios(
        SHIPPED.read_text(encoding="utf-8").splitlines(), source="s", owner_tz=SH
    )
    assert loaded.problems == []
    assert loaded.days == []
    docs = shipped()
    assert len(loaded.scenarios) == len(docs) >= 150
    for lang in ("zh", "en"):
        mine = [d for d in docs if d["lang"] == lang]
        assert len(mine) >= 75
        assert {d["expect"]["push"] for d in mine} == {True, False}
        assert any(d["expect"].get("urgency") == "critical" for d in mine)
    assert all(len(d["why"]) >= 10 and d["tags"] for d in docs)


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
def test_a_silent_model_on_the_shipped_set(workdir: Workdir, fake: FakeOpenAI) -> None:
    """A model that never pushes: every reply parsed, no push, recall zero, no false alarm."""
    workdir.write_config(gate=GATE)
    fake.default_reply = "[decision:no_push]"
    data = eval_json(workdir, str(SHIPPED))
    # 162 scenarios, 65 of which expect a push. In 4 of them (two per language) the
    # owner wrote within the 10-minute activity window, so the pre-gate skips the
    # round and the model is asked 158 times.
    assert (data["scenarios"], data["runs"], data["replies"], data["pushes"]) == (162, 162, 158, 0)
    assert len(fake.chat_requests) == 158
    assert data["parse_rate"] == 1.0
    assert data["push_precision"] is None  # nothing pushed: no precision to speak of
    assert data["push_recall"] == 0.0
    assert data["false_alarm_rate"] == 0.0
    assert data["critical_recall"] == 0.0
    assert data["on_point_rate"] is None
    # Silent all along: no better than chance, and no model figures beyond the gate's.
    assert data["kappa"] == 0.0
    assert data["figures"]["model"]["runs"] == 158
    assert data["figures"]["model"]["pushes"] == 0
    assert data["baselines"]["never"] == data["figures"]["delivered"]
    for lang in ("zh", "en"):
        figures = data["by_lang"][lang]
        assert (figures["scenarios"], figures["runs"], figures["replies"]) == (81, 81, 79)
        assert (figures["parse_rate"], figures["push_recall"]) == (1.0, 0.0)
    skipped = [r["id"] for r in data["results"] if r["outcome"] == "skipped"]
    assert sorted(skipped) == sorted(
        [
            "zh-late-night-still-chatting",
            "zh-conversation-going",
            "en-late-night-still-chatting",
            "en-conversation-going",
        ]
    )
    assert all(r["model_push"] is None for r in data["results"] if r["id"] in skipped)
    assert [r["expected_push"] for r in data["results"]] == [d["expect"]["push"] for d in shipped()]
    # Nothing was written where the configured database lives.
    assert not (workdir.path / "bt.db").exists()


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
def test_a_model_that_always_pushes_on_the_shipped_set(workdir: Workdir, fake: FakeOpenAI) -> None:
    """Push is what the gate delivers: quiet hours, busy, dnd and backoff hold many back."""
    workdir.write_config(gate=GATE)
    fake.default_reply = "[decision:push]\nThinking of you today, hope all is well."
    data = eval_json(workdir, str(SHIPPED))
    # The model wants to push in all 158 rounds it is asked: recall 1, every silence a
    # false alarm, no better than chance.
    model = data["figures"]["model"]
    assert (model["runs"], model["pushes"]) == (158, 158)
    assert (model["push_recall"], model["false_alarm_rate"], model["kappa"]) == (1.0, 1.0, 0.0)
    # Of the 65 expected pushes, 22 are held back because this reply is routine: 13 at
    # night (quiet hours) and 9 while the owner is busy or on do-not-disturb; 43 are
    # delivered. Of the 97 expected silences, 4 are skipped before the model; the gate
    # delivers 74 of the other 93 and holds 19 back (quiet hours 10, unavailable 5,
    # unanswered 2, min_interval 2).
    assert (data["runs"], data["replies"], data["pushes"]) == (162, 158, 117)
    assert data["parse_rate"] == 1.0
    assert data["push_precision"] == pytest.approx(43 / 117)
    assert data["push_recall"] == pytest.approx(43 / 65)
    assert data["false_alarm_rate"] == pytest.approx(74 / 97)
    assert data["critical_recall"] == 0.0
    assert data["kappa"] == 0.0
    # The always baseline is exactly such a model, asked nothing: the same gate, the
    # same deliveries (its line names the expected word, so only on_point differs).
    always = dict(data["baselines"]["always"])
    delivered = dict(data["figures"]["delivered"])
    assert always.pop("on_point_rate") > delivered.pop("on_point_rate")
    assert always == delivered
    reasons = {r["id"]: r["reason"] for r in data["results"]}
    assert reasons["zh-smoke-alarm-at-night"] == "quiet_hours"
    assert reasons["en-carbon-monoxide"] == "unavailable"
    assert reasons["zh-two-unanswered"] == "unanswered"
    assert reasons["en-just-pushed"] == "min_interval"
    assert reasons["en-leave-me-alone"] == "web"
    # Every stale follow-up, cancelled plan and repeated nag falls in the day: the gate
    # lets each one through, and only the model could have held them back. Of the
    # farewells, two are goodnights the quiet hours cover.
    for tag in ("stale_followup", "cancelled", "repeat_nag", "farewell"):
        figures = data["by_tag"][tag]
        assert figures["figures"]["model"]["false_alarm_rate"] == 1.0, tag
        wanted = 14 / 16 if tag == "farewell" else 1.0
        assert figures["false_alarm_rate"] == pytest.approx(wanted), tag


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
@pytest.mark.parametrize("output", ["footer", "json_schema"])
def test_the_right_reply_for_every_scenario_scores_perfectly(
    workdir: Workdir, fake: FakeOpenAI, output: str
) -> None:
    """Answered as each scenario expects, the default gate delivers exactly the expected pushes."""
    workdir.write_config(f'[model]\noutput = "{output}"\n', gate=GATE)
    for file in (SHIPPED, HOLDOUT):
        fake.responder = RightReplies.from_file(file)
        data = eval_json(workdir, str(file))
        assert data["errors"] == 0
        for view in ("model", "delivered"):
            figures = data["figures"][view]
            for key in (
                "parse_rate",
                "push_precision",
                "push_recall",
                "critical_recall",
                "on_point_rate",
                "kappa",
            ):
                assert figures[key] == 1.0, (file.name, view, key)
            assert figures["false_alarm_rate"] == 0.0
        wrong = [r["id"] for r in data["results"] if r["push"] != r["expected_push"]]
        assert wrong == []


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
def test_the_right_replies_on_the_shipped_days(workdir: Workdir, fake: FakeOpenAI) -> None:
    """Days answered as each beat expects: every expected push delivered, none over budget."""
    workdir.write_config(gate=GATE)
    fake.responder = RightReplies.from_file(DAYS)
    data = eval_json(workdir, str(DAYS))
    assert (data["scenarios"], data["days"]) == (0, 12)
    assert (data["day_precision"], data["day_recall"], data["over_budget"]) == (1.0, 1.0, 0)
    model = data["day_figures"]["model"]
    assert (model["day_precision"], model["day_recall"], model["kappa"]) == (1.0, 1.0, 1.0)
    # The always baseline pushes at every beat the gate lets through: over budget.
    always = data["day_baselines"]["always"]
    assert always["over_budget"] > 0
    assert always["day_precision"] < 0.5
    assert data["day_baselines"]["never"]["pushes"] == 0
    for day in data["day_results"]:
        assert len(day["beats"]) >= 10
        assert day["pushes"] == sum(b["expected_push"] for b in day["beats"]) <= day["max_pushes"]


# -- a small set, worked by hand --------------------------------------------------


def scenario(sid: str, lang: str, at: str, expect: dict[str, Any], **more: Any) -> str:
    return json.dumps(
        {"id": sid, "lang": lang, "at": at, "expect": expect, "why": "test", **more},
        ensure_ascii=False,
    )


def decision(**fields: Any) -> str:
    base = {"thought": "想一想", "decision": "push", "channel": "", "urgency": "routine"}
    return json.dumps({**base, **fields}, ensure_ascii=False)


SMALL = [
    # A smoke alarm at 03:00: only a critical push gets through quiet hours.
    scenario(
        "zh-smoke",
        "zh",
        "2026-03-15T03:00:00+08:00",
        {"push": True, "urgency": "critical", "mentions": ["烟"]},
        state={"notes": ["烟雾报警器在响"]},
    ),
    # Daytime, the birthday the owner asked to be reminded of.
    scenario(
        "zh-birthday",
        "zh",
        "2026-03-13T10:00:00+08:00",
        {"push": True, "mentions": ["生日"]},
        history=[{"role": "user", "text": "周五提醒我妈妈生日", "at": "2026-03-10T09:00:00+08:00"}],
    ),
    # Daytime, nothing to say; the owner last wrote on the phone (a webhook channel).
    scenario(
        "en-quiet-day",
        "en",
        "2026-01-19T14:00:00+00:00",
        {"push": False},
        timezone="Europe/London",
        history=[
            {"role": "user", "text": "lunch was great", "at": "2026-01-19T12:00:00+00:00"},
            {
                "role": "user",
                "text": "ok back to work",
                "at": "2026-01-19T12:05:00+00:00",
                "channel": "phone",
            },
        ],
    ),
    # The owner wrote a minute ago: the pre-gate skips the round, no model call.
    scenario(
        "en-chatting",
        "en",
        "2026-01-19T20:00:00+00:00",
        {"push": False},
        timezone="Europe/London",
        history=[{"role": "user", "text": "and then?", "at": "2026-01-19T19:59:00+00:00"}],
    ),
]
REPLIES = [
    decision(urgency="critical", body="烟雾报警器在响，快去看看厨房！"),  # zh-smoke 1: delivered
    decision(body="烟雾报警器好像响了。"),  # zh-smoke 2: routine at 03:00, held back
    decision(body="今天是你妈妈的生日，记得打个电话。"),  # zh-birthday 1: delivered
    '{"thought": "想一想", "decision": "push"',  # zh-birthday 2: cut off, unreadable
    decision(decision="no_push", body=""),  # en-quiet-day 1: silent
    decision(body="Just checking in on you."),  # en-quiet-day 2: a false alarm, to the phone
]


def test_json_mode_figures_worked_by_hand(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """Four scenarios, two runs each, in json_schema mode: every figure as computed by hand."""
    workdir.write_config(
        f"""
[model]
output = "json_schema"

[channels.web]
type = "web"

[channels.phone]
type = "webhook"
url = "{receiver.url}"
""",
        gate=GATE,
    )
    file = workdir.path / "small.jsonl"
    file.write_text("\n".join(SMALL) + "\n", encoding="utf-8")
    fake.script(*REPLIES)
    data = eval_json(workdir, str(file), "--repeat", "2")

    assert (data["scenarios"], data["runs"], data["replies"], data["pushes"]) == (4, 8, 6, 3)
    assert data["output"] == "json_schema"
    # Replies 6, one unreadable.
    assert data["parse_rate"] == pytest.approx(5 / 6)
    # Pushed: smoke 1, birthday 1 (right), quiet-day 2 (wrong).
    assert data["push_precision"] == pytest.approx(2 / 3)
    # Expected pushes: smoke x2, birthday x2; two of the four delivered.
    assert data["push_recall"] == 0.5
    # Expected silences: quiet-day x2, chatting x2; one pushed.
    assert data["false_alarm_rate"] == 0.25
    # Expected critical: smoke x2; one delivered at critical.
    assert data["critical_recall"] == 0.5
    # Both right pushes carry the urgency and the word asked for.
    assert data["on_point_rate"] == 1.0
    zh, en = data["by_lang"]["zh"], data["by_lang"]["en"]
    assert (zh["runs"], zh["replies"], zh["pushes"]) == (4, 4, 2)
    assert zh["parse_rate"] == 0.75
    assert (zh["push_precision"], zh["push_recall"], zh["false_alarm_rate"]) == (1.0, 0.5, None)
    assert (en["runs"], en["replies"], en["pushes"]) == (4, 2, 1)
    assert (en["parse_rate"], en["push_precision"], en["push_recall"]) == (1.0, 0.0, None)
    assert (en["false_alarm_rate"], en["critical_recall"]) == (0.25, None)

    outcomes = [(r["id"], r["run"], r["outcome"], r["reason"]) for r in data["results"]]
    assert outcomes == [
        ("zh-smoke", 1, "delivered", "web"),
        ("zh-smoke", 2, "suppressed", "quiet_hours"),
        ("zh-birthday", 1, "delivered", "web"),
        ("zh-birthday", 2, "suppressed", "parse_failed"),
        ("en-quiet-day", 1, "suppressed", "no_push"),
        ("en-quiet-day", 2, "delivered", "phone"),
        ("en-chatting", 1, "skipped", "owner_active"),
        ("en-chatting", 2, "skipped", "owner_active"),
    ]
    assert data["results"][3]["problems"] == ["invalid_json"]
    assert data["results"][0]["urgency"] == "critical"
    # The model's own decisions, before the gate: push, push, push, (unreadable: no
    # push), no push, push; the two chatting runs asked no model.
    decided = [(r["model_push"], r["model_urgency"]) for r in data["results"]]
    assert decided == [
        (True, "critical"),
        (True, "routine"),
        (True, "routine"),
        (False, "routine"),
        (False, "routine"),
        (True, "routine"),
        (None, None),
        (None, None),
    ]
    model = data["figures"]["model"]
    assert (model["runs"], model["pushes"]) == (6, 4)
    # Expected pushes: smoke x2, birthday x2; the model pushed 3 of them (the gate then
    # held smoke 2 back for quiet hours). Expected silences it was asked: quiet-day x2.
    assert model["push_recall"] == 0.75
    assert model["push_precision"] == 0.75
    assert model["false_alarm_rate"] == 0.5
    assert model["critical_recall"] == 0.5
    # Model kappa over 6 pairs: agree 4/6; the model pushed 4/6, 4/6 expected one:
    # chance = 4/6 * 4/6 + 2/6 * 2/6 = 5/9; kappa = (2/3 - 5/9) / (1 - 5/9) = 1/4.
    assert data["kappa"] == pytest.approx(0.25)
    assert data["figures"]["delivered"]["push_recall"] == data["push_recall"]
    # The baselines ran through the same rigs without a request to the endpoint.
    assert data["baselines"]["never"]["pushes"] == 0
    # always: smoke is routine at 03:00 (held back), birthday and quiet-day delivered.
    always = data["baselines"]["always"]
    assert (always["runs"], always["pushes"], always["push_recall"]) == (4, 2, 0.5)

    # Every request asked for the decision object and offered no tools.
    assert len(fake.chat_requests) == 6
    for request in fake.chat_requests:
        assert request.body["response_format"]["type"] == "json_schema"
        assert "tools" not in request.body
    assert data["tokens"]["completion"] == sum(rough_tokens(r) for r in REPLIES)
    assert data["tokens"]["total"] == data["tokens"]["prompt"] + data["tokens"]["completion"]
    latency = data["latency_ms"]
    assert 0 <= latency["p50"] <= latency["p95"] <= latency["max"]
    # The phone channel only recorded; the configured webhook never heard of it.
    assert receiver.received == []
    assert not (workdir.path / "bt.db").exists()


def test_the_table_shows_each_scenario_and_the_figures(workdir: Workdir, fake: FakeOpenAI) -> None:
    """Without --json: one row per scenario with its verdict, then the figures per language."""
    workdir.write_config(gate=GATE)
    file = workdir.path / "small.jsonl"
    file.write_text("\n".join(SMALL[1:3]) + "\n", encoding="utf-8")
    fake.script("[我决定:push]\n今天是你妈妈的生日，记得打个电话。", "[decision:no_push]")
    out = workdir.cli("eval", str(file)).stdout
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("zh-", "en-"))}
    assert rows["zh-birthday"].split()[1:6] == ["zh", "push", "1/1", "1/1", "ok"]
    assert rows["en-quiet-day"].split()[1:6] == ["en", "no_push", "0/1", "0/1", "ok"]
    figures = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    # model, delivered, then the baselines never and always
    assert figures["push_recall"] == ["100.0%", "100.0%", "0.0%", "100.0%"]
    assert figures["false_alarm_rate"] == ["0.0%", "0.0%", "0.0%", "100.0%"]
    assert figures["kappa"] == ["1.00", "1.00", "0.00", "0.00"]
    # per language: n, kappa, then precision, recall, false alarms of the model, of
    # what was delivered, and recall and false alarms of the always baseline
    hundred = "100.0%"
    assert figures["zh"] == ["1", "-", hundred, hundred, "-", hundred, hundred, "-", hundred, "-"]
    assert figures["en"] == ["1", "-", "-", "-", "0.0%", "-", "-", "0.0%", "-", hundred]


# -- bad lines --------------------------------------------------------------------

GOOD = scenario("ok-1", "en", "2026-01-19T14:00:00+00:00", {"push": False}, timezone="UTC")
BAD_LINES = [
    ("{oops", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"id": "x", "lang": "en", "at": "2026-01-19T14:00:00+00:00"}),
     "expect: Field required"),
    (scenario("x", "fr", "2026-01-19T14:00:00Z", {"push": False}),
     "lang: Input should be 'zh' or 'en'"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False}, expcet=1), "expcet: unknown key"),
    (scenario("x", "en", "yesterday", {"push": False}), "at: Input should be a valid datetime"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": "maybe"}),
     "expect.push: Input should be a valid boolean"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False, "urgency": "critical"}),
     "expect: urgency and mentions belong to an expected push"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": True, "urgency": "high"}),
     "expect.urgency: Input should be 'routine', 'warning' or 'critical'"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False}, timezone="Mars/Base"),
     "timezone: unknown time zone 'Mars/Base'"),
    (scenario("x", "en", "2026-01-19T14:00:00+05:30", {"push": False}),
     "at: the offset +05:30 is not owner.timezone's; name a timezone"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False},
              history=[{"role": "user", "text": "hi", "at": "2026-01-19T15:00:00Z"}]),
     "history.0.at: later than the round's at"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False},
              history=[{"role": "owner", "text": "hi", "at": "2026-01-19T13:00:00Z"}]),
     "history.0.role: Input should be 'user', 'assistant' or 'system'"),
    (scenario("x", "en", "2026-01-19T14:00:00Z", {"push": False}, state={"availability": "asleep"}),
     "state.availability: Input should be 'available', 'busy' or 'dnd'"),
    (GOOD, "id: 'ok-1' is already used on line 1"),
]  # fmt: skip


def test_every_bad_line_gets_one_clear_problem_and_nothing_else_is_lost() -> None:
    """Each malformed line yields one `file:line: problem`; every good line around it loads."""
    lines = [GOOD, ""]
    for text, _ in BAD_LINES:
        lines += [text, "# a comment"]
    good_after = scenario("ok-2", "zh", "2026-03-13T10:00:00+08:00", {"push": True})
    lines.append(good_after)
    loaded = load_scenarios(lines, source="f.jsonl", owner_tz=SH)
    assert [s.id for s in loaded.scenarios] == ["ok-1", "ok-2"]
    assert len(loaded.problems) == len(BAD_LINES)
    for number, (problem, (_, expected)) in enumerate(zip(loaded.problems, BAD_LINES, strict=True)):
        assert problem.startswith(f"f.jsonl:{3 + 2 * number}: {expected}"), problem
        assert "\n" not in problem


def test_the_cli_reports_bad_lines_on_stderr_and_runs_the_rest(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    """Bad lines go to stderr one by one, the good ones run, and eval still exits 0."""
    workdir.write_config(gate=GATE)
    file = workdir.path / "mixed.jsonl"
    file.write_text("\n".join([BAD_LINES[0][0], GOOD, BAD_LINES[2][0]]) + "\n", encoding="utf-8")
    proc = workdir.cli("eval", str(file), "--json")
    assert proc.stderr.splitlines() == [
        f"backthink: {file}:1: not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))",
        f"backthink: {file}:3: expect: Field required",
    ]
    data = json.loads(proc.stdout)
    assert (data["scenarios"], data["runs"]) == (1, 1)
    assert len(data["invalid"]) == 2


def test_a_file_without_one_good_line_is_a_usage_error(workdir: Workdir) -> None:
    """Nothing to run: exit 2 after naming each bad line."""
    file = workdir.path / "bad.jsonl"
    file.write_text(BAD_LINES[0][0] + "\n", encoding="utf-8")
    proc = workdir.cli("eval", str(file), check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"backthink: {file}: no valid scenario to run"
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("at", "timezone", "owner", "zone"),
    [
        ("2026-03-15T23:30:00+08:00", None, "Asia/Shanghai", "Asia/Shanghai"),
        ("2026-03-15T23:30:00+08:00", None, "America/New_York", "Etc/GMT-8"),
        ("2026-01-15T23:30:00-05:00", None, "Asia/Shanghai", "Etc/GMT+5"),
        ("2026-01-15T23:30:00+00:00", None, "Asia/Shanghai", "UTC"),
        ("2026-07-15T23:30:00+01:00", "Europe/London", "Asia/Shanghai", "Europe/London"),
        ("2026-03-15T23:30:00", None, "Asia/Tokyo", "Asia/Tokyo"),
    ],
)
def test_late_night_stays_late_night_whatever_the_owner_zone(
    at: str, timezone: str | None, owner: str, zone: str
) -> None:
    """A scenario's `at` is the owner's local time, whichever zone the config names."""
    extra = {"timezone": timezone} if timezone else {}
    loaded = load_scenarios(
        [scenario("x", "en", at, {"push": False}, **extra)], source="f", owner_tz=ZoneInfo(owner)
    )
    [one] = loaded.scenarios
    assert one.tz.key == zone
    local = one.at.astimezone(one.tz)
    assert (local.hour, local.minute) == (23, 30)


# -- the arithmetic -----------------------------------------------------------------


def run(
    expected: bool,
    pushed: bool,
    *,
    lang: str = "en",
    replied: bool = True,
    parsed: bool | None = True,
    urgency: Urgency | None = None,
    expected_urgency: Urgency | None = None,
    mentions: tuple[str, ...] = (),
    body: str | None = None,
    sid: str = "s",
) -> RunResult:
    return RunResult(
        id=sid,
        lang=lang,
        run=1,
        expected_push=expected,
        push=pushed,
        outcome="delivered" if pushed else "suppressed",
        reason="web" if pushed else "no_push",
        expected_urgency=expected_urgency,
        mentions=mentions,
        urgency=urgency,
        body=body,
        replied=replied,
        parsed=parsed if replied else None,
        latency_ms=10.0 if replied else None,
    )


def test_rates_of_a_hand_made_set() -> None:
    """Precision, recall, false alarms, critical recall and parse rate, counted by hand."""
    c = Urgency.CRITICAL
    results = [
        run(True, True),  # a right push
        run(True, False),  # a miss
        run(True, True, urgency=c, expected_urgency=c),  # a right critical push
        run(True, True, urgency=Urgency.WARNING, expected_urgency=c),  # right, not critical
        run(False, True),  # a false alarm
        run(False, False),
        run(False, False, parsed=False),  # unreadable
        run(False, False, replied=False),  # skipped before the model
    ]
    figures = rates(results)
    assert (figures["runs"], figures["replies"], figures["pushes"]) == (8, 7, 4)
    assert figures["parse_rate"] == pytest.approx(6 / 7)
    assert figures["push_precision"] == pytest.approx(3 / 4)
    assert figures["push_recall"] == pytest.approx(3 / 4)
    assert figures["false_alarm_rate"] == pytest.approx(1 / 4)
    assert figures["critical_recall"] == pytest.approx(1 / 2)
    assert figures["on_point_rate"] == pytest.approx(2 / 3)


def test_empty_denominators_are_none_not_zero() -> None:
    """A rate with nothing to divide is None: no pushes means no precision, not 0%."""
    figures = rates([run(False, False)])
    assert figures["push_precision"] is None
    assert figures["push_recall"] is None
    assert figures["critical_recall"] is None
    assert figures["false_alarm_rate"] == 0.0
    assert rates([])["parse_rate"] is None
    assert ratio(0, 0) is None and ratio(1, 4) == 0.25


@pytest.mark.parametrize(
    ("mentions", "body", "urgency", "wanted", "on_point"),
    [
        ((), "hi", None, None, True),
        (("Exam", "考试"), "good luck on the exam!", None, None, True),
        (("生日",), "今天是你妈妈的生日", None, None, True),
        (("birthday",), "hello there", None, None, False),
        ((), "fire!", Urgency.WARNING, Urgency.CRITICAL, False),
        ((), "fire!", Urgency.CRITICAL, Urgency.WARNING, True),
    ],
)
def test_on_point_needs_the_urgency_and_one_of_the_words(
    mentions: tuple[str, ...],
    body: str,
    urgency: Urgency | None,
    wanted: Urgency | None,
    on_point: bool,
) -> None:
    """A right push is on point with at least the urgency and any one mention, any case."""
    result = run(True, True, mentions=mentions, body=body, urgency=urgency, expected_urgency=wanted)
    assert result.on_point() is on_point


def test_percentiles_and_verdicts() -> None:
    """Nearest-rank percentiles; a scenario's verdict over its runs."""
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 21)], 0.95) == 19.0
    assert verdict([run(True, True), run(True, True)]) == "ok"
    assert verdict([run(True, False)]) == "missed"
    assert verdict([run(False, True)]) == "false alarm"
    assert verdict([run(True, True), run(True, False)]) == "1/2 right"


_runs = st.builds(
    run,
    st.booleans(),
    st.booleans(),
    lang=st.sampled_from(["zh", "en"]),
    replied=st.booleans(),
    parsed=st.booleans(),
    urgency=st.sampled_from([None, *Urgency]),
    expected_urgency=st.sampled_from([None, *Urgency]),
)


@given(st.lists(_runs, max_size=40))
def test_figures_are_fractions_that_agree_with_each_other(results: list[RunResult]) -> None:
    """Rates lie in 0..1, precision and recall count the same right pushes, languages add up."""
    data = report(results, scenarios=len(results), model="m", output="footer")
    for key in ("parse_rate", "push_precision", "push_recall", "false_alarm_rate"):
        value = data[key]
        assert value is None or 0.0 <= value <= 1.0
    right = sum(1 for r in results if r.push and r.expected_push)
    if data["push_precision"] is not None:
        assert data["push_precision"] * data["pushes"] == pytest.approx(right)
    expected = sum(1 for r in results if r.expected_push)
    if data["push_recall"] is not None:
        assert data["push_recall"] * expected == pytest.approx(right)
    assert sum(f["runs"] for f in data["by_lang"].values()) == data["runs"] == len(results)
    assert sum(f["pushes"] for f in data["by_lang"].values()) == data["pushes"]


def test_kappa_by_hand() -> None:
    """Cohen's kappa: full agreement 1, chance 0, contrary below 0, undefined when constant."""
    assert kappa([]) is None
    assert kappa([(True, True), (False, False)]) == 1.0
    assert kappa([(True, False), (False, True)]) == -1.0
    # A scorer that always pushes agrees only by chance, whatever the labels.
    assert kappa([(True, True), (True, False), (True, False)]) == 0.0
    # Both constant and equal: chance explains everything, there is nothing to measure.
    assert kappa([(False, False), (False, False)]) is None
    # 10 pairs: agree on 7; decided 5/10, expected 4/10: chance 0.2 + 0.3 = 0.5.
    pairs = [(True, True)] * 3 + [(True, False)] * 2 + [(False, True)] + [(False, False)] * 4
    assert kappa(pairs) == pytest.approx((0.7 - 0.5) / 0.5)


# -- days ----------------------------------------------------------------------------


def day_line(beats: list[dict[str, Any]], max_pushes: int, **more: Any) -> str:
    doc = {"id": "en-day", "lang": "en", "timezone": "Europe/London", "day": beats,
           "max_pushes": max_pushes, "why": "test", "tags": ["day"], **more}  # fmt: skip
    return json.dumps(doc, ensure_ascii=False)


DAY = day_line(
    [
        # 07:30: they asked last night for a reminder at 8; nothing yet.
        {
            "at": "2026-01-20T07:30:00+00:00",
            "history": [
                {"role": "user", "text": "remind me at 8 to call the vet",
                 "at": "2026-01-19T21:00:00+00:00"},
            ],
            "expect": {"push": False},
        },
        # 08:00: the reminder.
        {"at": "2026-01-20T08:00:00+00:00", "expect": {"push": True, "mentions": ["vet"]}},
        # 09:00: they answered at 08:30; nothing to say. The model pushes anyway, and the
        # gate's history from 08:00 holds it back (minimum interval).
        {
            "at": "2026-01-20T09:00:00+00:00",
            "history": [{"role": "user", "text": "called, thanks",
                         "at": "2026-01-20T08:30:00+00:00"}],
            "expect": {"push": False},
        },
        # 10:30: nothing to say; the model pushes again and, past the interval, it goes out.
        {"at": "2026-01-20T10:30:00+00:00", "state": {"availability": "available"},
         "expect": {"push": False}},
    ],
    1,
)  # fmt: skip


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
def test_a_day_keeps_the_gate_history_between_beats(workdir: Workdir, fake: FakeOpenAI) -> None:
    """Beats share one session: a push at 08:00 holds the 09:00 one back; the day's budget."""
    workdir.write_config(gate=GATE)
    file = workdir.path / "day.jsonl"
    file.write_text(DAY + "\n" + SMALL[2] + "\n", encoding="utf-8")
    # Single scenarios run first, then the days.
    fake.script(
        "[decision:no_push]",  # en-quiet-day
        "[decision:no_push]",
        "[decision:push]\nIt is eight: the clinic is expecting your vet call.",
        "[decision:push]\nHow did the vet call go?",
        "[decision:push]\nThinking of you this morning.",
    )
    data = eval_json(workdir, str(file))
    assert (data["scenarios"], data["days"]) == (1, 1)
    # The single scenario's figures know nothing of the day.
    assert (data["runs"], data["pushes"]) == (1, 0)
    [day] = data["day_results"]
    beats = [(b["id"], b["outcome"], b["reason"]) for b in day["beats"]]
    assert beats == [
        ("en-day@1", "suppressed", "no_push"),
        ("en-day@2", "delivered", "web"),
        ("en-day@3", "suppressed", "min_interval"),
        ("en-day@4", "delivered", "web"),
    ]
    assert (day["pushes"], day["model_pushes"], day["max_pushes"]) == (2, 3, 1)
    assert day["over_budget"] is True
    # The 10:30 request saw the 08:00 push and the owner's answer in its session.
    last = " ".join(str(m["content"]) for m in fake.chat_requests[4].body["messages"])
    assert "the clinic is expecting your vet call" in last and "called, thanks" in last
    # Delivered: 2 pushes, 1 right; 1 expected, delivered. The model pushed 3 times.
    assert (data["day_precision"], data["day_recall"], data["over_budget"]) == (0.5, 1.0, 1)
    model = data["day_figures"]["model"]
    assert (model["beats"], model["pushes"], model["day_precision"]) == (4, 3, pytest.approx(1 / 3))
    assert model["over_budget"] == 1
    # The always baseline pushes at 07:30, too early; the interval then holds back the
    # 08:00 and 09:00 lines, and the 10:30 one repeats the 07:30 line word for word.
    always = data["day_baselines"]["always"]
    assert (always["beats"], always["pushes"], always["over_budget"]) == (4, 1, 0)
    assert (always["day_precision"], always["day_recall"]) == (0.0, 0.0)


BAD_DAYS = [
    (day_line([], 1), "day: List should have at least 1 item"),
    (day_line([{"at": "2026-01-20T09:00:00Z", "expect": {"push": False}},
               {"at": "2026-01-20T08:00:00Z", "expect": {"push": False}}], 1),
     "day.1.at: not later than the beat before it"),
    (day_line([{"at": "2026-01-20T09:00:00Z", "expect": {"push": False},
                "history": [{"role": "user", "text": "hi", "at": "2026-01-20T10:00:00Z"}]}], 1),
     "day.0.history.0.at: later than the round's at"),
    (day_line([{"at": "2026-01-20T09:00:00Z", "expect": {"push": False}, "mood": "x"}], 1),
     "day.0.mood: unknown key"),
    (day_line([{"at": "2026-01-20T09:00:00Z", "expect": {"push": False}}], -1),
     "max_pushes: Input should be greater than or equal to 0"),
]  # fmt: skip


def test_bad_days_get_one_clear_problem() -> None:
    """A day with no beats, beats out of order, a message after its beat: one problem each."""
    lines = [text for text, _ in BAD_DAYS] + [DAY]
    loaded = load_scenarios(lines, source="d.jsonl", owner_tz=SH)
    assert [d.id for d in loaded.days] == ["en-day"]
    assert [b.id for b in loaded.days[0].beats] == [f"en-day@{n}" for n in range(1, 5)]
    for number, (problem, (_, expected)) in enumerate(zip(loaded.problems, BAD_DAYS, strict=True)):
        assert problem.startswith(f"d.jsonl:{number + 1}: {expected}"), problem


# -- comparing runs ------------------------------------------------------------------


@pytest.mark.timeout(SHIPPED_TEST_TIMEOUT_S)
def test_compare_two_saved_runs(workdir: Workdir, fake: FakeOpenAI) -> None:
    """Two saved runs side by side: each figure, the difference, the scenarios that changed."""
    workdir.write_config(gate=GATE)
    file = workdir.path / "small.jsonl"
    file.write_text("\n".join(SMALL[1:3]) + "\n", encoding="utf-8")
    fake.default_reply = "[decision:no_push]"
    silent = workdir.cli("eval", str(file), "--json").stdout
    fake.default_reply = "[decision:push]\nThinking of you today, hope all is well."
    pushy = workdir.cli("eval", str(file), "--json").stdout
    (workdir.path / "a.json").write_text(silent, encoding="utf-8")
    (workdir.path / "b.json").write_text(pushy, encoding="utf-8")
    requests = len(fake.chat_requests)

    data = json.loads(workdir.cli("eval", "--compare", "a.json", "b.json", "--json").stdout)
    assert data["delivered"]["push_recall"] == {"a": 0.0, "b": 1.0, "diff": 1.0}
    assert data["delivered"]["false_alarm_rate"] == {"a": 0.0, "b": 1.0, "diff": 1.0}
    assert data["model"]["push_precision"] == {"a": None, "b": 0.5, "diff": None}
    assert data["better"] == ["zh-birthday"]
    assert data["worse"] == ["en-quiet-day"]
    assert data["by_lang"]["en"]["false_alarm_rate"]["diff"] == 1.0

    out = workdir.cli("eval", "--compare", "a.json", "b.json").stdout
    rows = {line[:30].strip(): line[30:].split() for line in out.splitlines()}
    assert rows["push_recall"] == ["0.0%", "100.0%", "+100.0", "pp"]
    assert "right in B, not in A (1): zh-birthday" in out
    assert "right in A, not in B (1): en-quiet-day" in out
    assert "days" not in out.splitlines()  # neither run had days
    # Comparing asks no model.
    assert len(fake.chat_requests) == requests


def test_compare_refuses_what_is_not_a_saved_run(workdir: Workdir) -> None:
    """A missing file, or one that is not an `eval --json` object, is a usage error."""
    (workdir.path / "x.json").write_text('{"nope": 1}', encoding="utf-8")
    proc = workdir.cli("eval", "--compare", "x.json", "missing.json", check=False)
    assert proc.returncode == 2
    assert "x.json: not a saved `eval --json` run" in proc.stderr
    proc = workdir.cli("eval", check=False)
    assert proc.returncode == 2
    assert "missing the scenario file" in proc.stderr
