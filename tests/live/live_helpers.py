"""Shared by the live tests and the live report: a working folder running rounds on a real model."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from backthink.decision.failsafe import ECHOED_FOOTER, ECHOED_PROMPT
from backthink.decision.footer import parse_footer
from backthink.models import Message, Urgency
from backthink.records import RoundRecord
from backthink.store import open_store
from backthink.testing import proactive_messages, run_cli

ROOT: Final = Path(__file__).resolve().parents[2]
BASE_URL_ENV: Final = "BACKTHINK_LIVE_BASE_URL"
MODEL_ENV: Final = "BACKTHINK_LIVE_MODEL"
# The name tests/live/run.py serves the model under; a single-model llama.cpp server
# answers any name, so this only matters for `backthink check`'s "is listed" line.
DEFAULT_MODEL: Final = "SmolLM2-135M-Instruct"

MODEL_TIMEOUT_S: Final = 120  # seconds per round; a 2-core CPU is slow on long prompts
MAX_TOKENS: Final = 200  # tokens; room for a footer and a short body, and rounds stay quick
# A CLI run is one round plus interpreter start-up and the database migration.
CLI_TIMEOUT_S: Final = MODEL_TIMEOUT_S + 60  # seconds
OWNER_ID: Final = "o"
PERSONA_ID: Final = "cyrene"

# The documented outcome table (README "Round outcomes"); a delivered round's reason
# is the channel name, checked against the configured channels instead.
REASONS: Final[dict[str, frozenset[str]]] = {
    "skipped": frozenset({"busy", "owner_active", "quiet_hours", "no_route", "disabled"}),
    "suppressed": frozenset(
        {
            "no_push",
            "parse_failed",
            "empty_body",
            "body_too_long",
            "quiet_hours",
            "unavailable",
            "owner_active",
            "min_interval",
            "daily_cap",
            "unanswered",
            "duplicate",
            "no_route",
        }
    ),
    "failed": frozenset(
        {"model_error", "model_timeout", "delivery_failed", "store_error", "internal_error"}
    ),
}
CHANNELS: Final = ("web",)
# Notes of a push the round refused after parsing: its body echoed the prompt or a
# footer from a user message.
ECHO_REFUSALS: Final = frozenset({ECHOED_PROMPT, ECHOED_FOOTER})

# Written independently of backthink.decision.footer on purpose: the invariants are checked
# against what the model literally wrote, not against the parser's own reading of it.
_BRACKETS = r"[\[【][^\S\n]*(?:{keys})[^\S\n]*[:：][^\S\n]*(?P<value>[^\[\]【】\n]*?)[^\S\n]*[\]】]"
DECISION_TAG: Final = re.compile(_BRACKETS.format(keys="我决定|decision"), re.IGNORECASE)
URGENCY_TAG: Final = re.compile(_BRACKETS.format(keys="紧急|urgency"), re.IGNORECASE)
THINK_CLOSE: Final = re.compile(r"<\s*/\s*think(?:ing)?\s*>", re.IGNORECASE)
FENCE_LINE: Final = re.compile(r"^[^\S\n]*(?:`{3,}|~{3,})[^\S\n]*[\w+#.-]*[^\S\n]*$", re.MULTILINE)

PERSONA_EN: Final = (
    "You are your owner's AI companion: gentle, attentive and tactful. You remember what "
    "you talked about, care about their sleep and mood, never interrupt their work and "
    "never lecture. You speak briefly and naturally, like a friend who knows them well."
)

# Recent main-session messages, (minutes ago, role, text). All are older than the
# activity window, so a push is judged by the gate rather than dropped as "owner chatting".
SEED: Final[dict[str, list[tuple[int, str, str]]]] = {
    "zh": [
        (300, "user", "明天下午三点要组会，我的幻灯片还没做完"),
        (299, "assistant", "别急，先把结论那页写出来，其余的慢慢补。我陪着你。"),
        (240, "user", "做完了！不过我有点紧张，怕被老师问住"),
        (239, "assistant", "你准备得很认真，被问住也没关系，回来我们一起想。"),
        (180, "user", "好，我先去吃饭了，晚上可能去跑步"),
    ],
    "en": [
        (300, "user", "I have a team review at 3 pm tomorrow and my slides aren't done yet"),
        (299, "assistant", "Start with the conclusion slide; the rest can follow. I'm here."),
        (240, "user", "Done! A bit nervous though, what if they ask something I can't answer"),
        (
            239,
            "assistant",
            "You prepared well. If a question stumps you, we'll think it over after.",
        ),
        (180, "user", "Ok, going to grab dinner now, maybe a run tonight"),
    ],
}


@dataclass
class LiveWorkdir:
    """A temp folder with its own config and database, running the real CLI against a live model.

    The gate is opened up (no quiet hours, no rate limits, no unanswered backoff) so a
    push the model decides on is judged on the model's reply, not on the time of day
    the suite happens to run; the footer and body rules still apply in full.
    """

    path: Path
    base_url: str
    language: str
    model: str = DEFAULT_MODEL
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        # The caller's own endpoint settings must not leak in and point rounds elsewhere.
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))
        }
        self.env["BACKTHINK_MODEL__BASE_URL"] = self.base_url
        self.write_config()

    @property
    def config(self) -> Path:
        return self.path / "backthink.toml"

    @property
    def database(self) -> str:
        return f"sqlite+aiosqlite:///{self.path / 'bt.db'}"

    def write_config(self) -> None:
        """Write the config: shipped prompts, a fresh database, the live model, an open gate."""
        if self.language == "zh":
            persona_file = ""  # the shipped default persona
            owner_name, persona_name = "开拓者", "昔涟"
        else:
            en_file = self.path / "persona.en.md"
            en_file.write_text(PERSONA_EN + "\n", encoding="utf-8")
            persona_file = str(en_file)
            owner_name, persona_name = "Alex", "Cyrene"
        self.config.write_text(
            f"""
[owner]
id = "{OWNER_ID}"
name = "{owner_name}"
timezone = "Asia/Shanghai"

[persona]
id = "{PERSONA_ID}"
name = "{persona_name}"
prompt_file = "{persona_file}"

[model]
name = "{self.model}"
timeout_s = {MODEL_TIMEOUT_S}
max_retries = 0
max_tokens = {MAX_TOKENS}

[database]
url = "{self.database}"

[prompt]
language = "{self.language}"
dir = "{ROOT / "backthink/prompts"}"

[state]
file = "{self.path / "state.json"}"

[gate]
quiet_hours = ""
min_interval = "0s"
daily_cap = 100000
max_unanswered = 100000
""",
            encoding="utf-8",
        )

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `backthink --config <file> ARGS` as a real process."""
        return run_cli(
            self.config, *args, cwd=self.path, env=self.env, timeout_s=CLI_TIMEOUT_S, check=check
        )

    def seed(self, *, now: datetime | None = None) -> None:
        """Import the language's recent conversation through `messages import`."""
        now = now or datetime.now(UTC)
        lines = [
            json.dumps(
                {
                    "role": role,
                    "text": text,
                    "at": (now - timedelta(minutes=minutes)).isoformat(),
                    **({"speaker": PERSONA_ID} if role == "assistant" else {}),
                },
                ensure_ascii=False,
            )
            for minutes, role, text in SEED[self.language]
        ]
        file = self.path / "seed.jsonl"
        file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.cli("messages", "import", str(file))

    def think(self, trigger: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
        """Run `think --json`; a failed round exits 1 and still prints its JSON."""
        proc = self.cli("think", "--json", "--trigger", trigger, check=False)
        if proc.returncode not in (0, 1) or not proc.stdout.strip():
            raise AssertionError(
                f"think --trigger {trigger}: exit {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        result: dict[str, Any] = json.loads(proc.stdout)
        return result, proc

    def rounds_json(self, limit: int = 1) -> list[dict[str, Any]]:
        """The audit log as `rounds --json` prints it, newest first."""
        data: list[dict[str, Any]] = json.loads(
            self.cli("rounds", "--json", "--limit", str(limit)).stdout
        )
        return data

    def push_count(self) -> int:
        """How many proactive messages the main session holds."""
        return asyncio.run(self._push_count())

    async def _push_count(self) -> int:
        engine, messages, _ = await open_store(self.database)
        try:
            return len(await proactive_messages(messages, OWNER_ID, 500))
        finally:
            await engine.dispose()

    def stored(self, round_id: str) -> tuple[RoundRecord, list[Message]]:
        """The full round record (raw reply included) and the proactive messages, newest first."""
        return asyncio.run(self._stored(round_id))

    async def _stored(self, round_id: str) -> tuple[RoundRecord, list[Message]]:
        engine, messages, rounds = await open_store(self.database)
        try:
            record = await rounds.get(round_id)
            pushes = await proactive_messages(messages, OWNER_ID, 500)
        finally:
            await engine.dispose()
        if record is None:
            raise AssertionError(f"round {round_id} was not recorded")
        return record, pushes


def after_thinking(raw: str) -> str:
    """The reply after the last closing </think>: what a footer may come from."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    closings = list(THINK_CLOSE.finditer(text))
    return text[closings[-1].end() :] if closings else text


def _flat(text: str) -> str:
    """Fence lines removed and whitespace collapsed, for containment checks."""
    return " ".join(FENCE_LINE.sub("", text).split())


def urgency_written(raw: str) -> Urgency:
    """The highest urgency the reply spells out in a tag; routine when there is none."""
    written = [m["value"].strip().lower() for m in URGENCY_TAG.finditer(raw)]
    levels = [Urgency(v) for v in written if v in {u.value for u in Urgency}]
    return max(levels, key=lambda u: u.rank, default=Urgency.ROUTINE)


def pushes_written(raw: str) -> bool:
    """Whether the reply contains an explicit push decision tag anywhere."""
    return any(m["value"].strip().lower() == "push" for m in DECISION_TAG.finditer(raw))


def text_after_footer(raw: str) -> str | None:
    """What follows the last decision tag outside thinking; None when there is no tag."""
    visible = after_thinking(raw)
    tags = list(DECISION_TAG.finditer(visible))
    return visible[tags[-1].end() :] if tags else None


@dataclass(frozen=True)
class Checked:
    """One round read back from the CLI and the store, with every invariant it breaks."""

    summary: dict[str, Any]
    record: RoundRecord
    delivered_text: str | None
    violations: list[str]


def check_round(workdir: LiveWorkdir, result: dict[str, Any], *, pushes_before: int) -> Checked:
    """Read a finished round back and list the invariants it breaks (none, we hope).

    Args:
        workdir: where the round ran.
        result: what `think --json` printed for it.
        pushes_before: how many proactive messages the session held before the round.
    """
    problems: list[str] = []
    round_id = result["round_id"]
    (summary,) = [r for r in workdir.rounds_json(limit=1) if r["round_id"] == round_id] or [
        {"round_id": None}
    ]
    if summary["round_id"] != round_id:
        problems.append("rounds --json does not list the round as the newest")
        summary = result
    record, pushes = workdir.stored(round_id)
    outcome, reason = record.outcome.value, record.reason
    for key in ("outcome", "reason", "channel"):
        if result[key] != summary.get(key):
            problems.append(f"think --json and rounds --json disagree on {key}")

    # One documented outcome and reason, always.
    if outcome == "delivered":
        if reason not in CHANNELS or record.channel != reason:
            problems.append(f"delivered with reason {reason!r} and channel {record.channel!r}")
    elif reason not in REASONS.get(outcome, ()):
        problems.append(f"undocumented outcome/reason {outcome}/{reason}")
    if outcome == "failed":
        problems.append(f"round failed: {reason}: {'; '.join(record.notes)}")

    raw = record.raw_reply
    if outcome in ("suppressed", "delivered"):
        if raw is None:
            problems.append("no raw reply recorded")
        # Request figures: the live server reports usage, so all of it must be there.
        for key in ("prompt_tokens", "completion_tokens", "latency_ms"):
            value = summary.get(key)
            if not isinstance(value, int | float) or value <= 0:
                problems.append(f"{key} not recorded: {value!r}")
        if not summary.get("model"):
            problems.append("model not recorded")

    delivered_text = None
    new_pushes = len(pushes) - pushes_before
    if outcome == "delivered":
        if new_pushes != 1:
            problems.append(f"a delivered round wrote back {new_pushes} messages")
        else:
            delivered_text = pushes[0].text
            if pushes[0].channel != record.channel or pushes[0].speaker != PERSONA_ID:
                problems.append("the written-back message has the wrong channel or speaker")
    elif new_pushes != 0:
        problems.append(f"a {outcome} round wrote back {new_pushes} messages")

    if raw is not None:
        problems.extend(_reply_invariants(raw, record, delivered_text))
    return Checked(summary, record, delivered_text, problems)


def _reply_invariants(raw: str, record: RoundRecord, delivered: str | None) -> list[str]:
    problems: list[str] = []
    # Urgency never rises above what the reply wrote, and push needs a push token.
    urgency = record.urgency or Urgency.ROUTINE
    if urgency.rank > urgency_written(raw).rank:
        problems.append(f"urgency {urgency.value} without a token for it")
    if record.push and not pushes_written(raw):
        problems.append("push recorded without a push token in the reply")
    # Re-reading the reply gives the recorded decision: nothing else went into it,
    # except that a push whose body repeats a prompt line or a footer from a user
    # message is refused (recorded as no push, the refusal noted).
    again = parse_footer(raw)
    recorded = (record.push, record.urgency, record.decided_channel, record.body or "")
    refused = (
        again.push
        and recorded == (False, Urgency.ROUTINE, None, "")
        and bool(ECHO_REFUSALS & set(record.notes))
    )
    if recorded != (again.push, again.urgency, again.channel, again.body) and not refused:
        problems.append("the recorded decision differs from parse_footer(raw_reply)")
    if delivered is None:
        return problems
    # The delivered text comes from after the footer, outside any <think> block, so no
    # thinking before the footer can reach the owner.
    tail = text_after_footer(raw)
    if tail is None:
        problems.append("delivered, but the reply has no decision tag outside <think>")
    elif not delivered.strip() or _flat(delivered) not in _flat(tail):
        problems.append("the delivered text is not taken from after the footer")
    if delivered != record.body:
        problems.append("the delivered text differs from the recorded body")
    if DECISION_TAG.search(delivered):
        problems.append("the delivered text contains a decision tag")
    return problems


def run_checked(workdir: LiveWorkdir, trigger: str) -> Checked:
    """Run one `think --json` round and check it."""
    before = workdir.push_count()
    result, _ = workdir.think(trigger)
    return check_round(workdir, result, pushes_before=before)


def describe(checked: Checked) -> str:
    """A failure message: the round, what it broke, and the model's raw reply."""
    r = checked.record
    return (
        f"round {r.id} ({r.trigger}): {r.outcome.value}/{r.reason}, notes {r.notes}\n"
        f"violations: {checked.violations}\n"
        f"raw reply:\n{r.raw_reply!r}\n"
        f"delivered: {checked.delivered_text!r}"
    )
