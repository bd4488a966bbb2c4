"""The command line as a user runs it: real processes, a real local model endpoint, SQLite."""

from __future__ import annotations

import json

from conftest import ROOT, Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail

PUSH = "我想想……她昨天说组会紧张。\n[我决定:push]\n[紧急:warning]\n组会加油，你准备得很充分了。"
KEY = "sk-test-secret-0123456789"


def test_think_json_sends_exact_request(workdir: Workdir, fake: FakeOpenAI) -> None:
    """think --json runs one round; the endpoint sees persona, history, prompt and state last."""
    workdir.cli(
        "messages",
        "add",
        "--role",
        "user",
        "--text",
        "明天组会好紧张",
        "--at",
        "2026-11-29T22:00:00+08:00",
    )
    workdir.cli(
        "messages",
        "add",
        "--role",
        "assistant",
        "--text",
        "别怕，我陪你",
        "--speaker",
        "aglaea",
        "--at",
        "2026-11-29T22:01:00+08:00",
    )
    workdir.cli(
        "messages",
        "add",
        "--role",
        "user",
        "--text",
        "看这个",
        "--image",
        "https://example.invalid/cat.png",
        "--at",
        "2026-11-29T22:02:00+08:00",
    )
    workdir.write_state({"availability": "busy", "notes": ["昨晚睡得晚"]})
    fake.script(PUSH)
    result = workdir.think_json()
    assert (result["outcome"], result["reason"], result["channel"]) == ("delivered", "web", "web")
    assert result["decision"] == {
        "push": True,
        "channel": None,
        "urgency": "warning",
        "body": "组会加油，你准备得很充分了。",
    }
    (request,) = fake.chat_requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.body
    assert body["model"] == "fake-model" and body["max_tokens"] == 400
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "system", "system", "user", "system", "assistant", "user", "user"]
    msgs = body["messages"]
    assert msgs[1]["content"].startswith("[会话角色] ")
    assert msgs[2]["content"] == "[时间] 2026年11月29日 周日 22:00"
    assert msgs[3]["content"] == "明天组会好紧张"
    assert msgs[4]["content"] == "[发言归属] 以下发言来自「aglaea」，不是你说的。"
    assert msgs[6]["content"] == [
        {"type": "text", "text": "看这个"},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
    ]
    prompt = msgs[-1]["content"]
    assert "[我决定:push]" in prompt
    tail = prompt.split("\n\n")[-1].splitlines()
    assert tail[0] == "触发：定时心跳"
    assert tail[2:4] == ["[主人当前状态]", "- 可用性：忙碌"]
    assert "- 备注：昨晚睡得晚" in tail


def test_rounds_shows_the_audit_log(workdir: Workdir, fake: FakeOpenAI) -> None:
    """rounds lists each round with its outcome and reason; --json for scripts."""
    fake.script("[我决定:no_push]", PUSH)
    workdir.think_json()
    workdir.think_json("--trigger", "startup")
    table = workdir.cli("rounds").stdout.splitlines()
    assert table[0].split() == [
        "started",
        "round",
        "trigger",
        "outcome",
        "reason",
        "channel",
        "urgency",
        "tokens",
        "ms",
        "tools",
    ]
    assert "startup" in table[1] and "delivered" in table[1] and " web " in table[1]
    assert "heartbeat" in table[2] and "no_push" in table[2]
    data = json.loads(workdir.cli("rounds", "--json", "--limit", "1").stdout)
    assert len(data) == 1 and data[0]["trigger"] == "startup"
    assert data[0]["prompt_tokens"] > 0 and data[0]["latency_ms"] >= 0
    assert "刚刚回来" in fake.chat_requests[1].body["messages"][-1]["content"]


def test_dry_run_calls_nothing(workdir: Workdir, fake: FakeOpenAI) -> None:
    """--dry-run prints the whole request, key redacted, and neither calls nor records."""
    workdir.cli("messages", "add", "--role", "user", "--text", "在吗")
    out = workdir.cli("think", "--dry-run").stdout
    head = out.split("--- 1 system ---")[0].splitlines()
    assert head[:4] == [
        "POST /chat/completions",
        "Authorization: Bearer <redacted>",
        "model: fake-model",
        "max_tokens: 400",
    ]
    assert head[4] == "tools: 4 offered in full, 888 of tools.max_chars = 2000 characters"
    assert [line.split(":")[1].strip() for line in head[5:]] == [
        "memory_search",
        "remember",
        "capability_list",
        "recent_rounds",
    ]
    assert "--- 2 system ---\n[时间] " in out and "--- 3 user ---\n在吗" in out
    assert "触发：定时心跳" in out
    assert KEY not in out
    body = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    assert set(body) == {"model", "tools", "messages", "max_tokens"}
    assert (body["model"], body["max_tokens"]) == ("fake-model", 400)
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user", "user"]
    assert body["messages"][2] == {"role": "user", "content": "在吗"}
    assert fake.chat_requests == []
    assert workdir.cli("rounds").stdout.strip() == "no rounds yet"


def test_dry_run_body_is_what_the_endpoint_receives(workdir: Workdir, fake: FakeOpenAI) -> None:
    """The --dry-run --json body equals the body a real round then POSTs."""
    workdir.cli(
        "messages", "add", "--role", "user", "--text", "看这个",
        "--image", "https://example.invalid/a.png", "--at", "2026-11-29T22:00:00+08:00",
    )  # fmt: skip
    shown = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    fake.script("[我决定:no_push]")
    workdir.think_json()
    (request,) = fake.chat_requests
    sent = request.body
    # The instruction prompt carries the minute of the round; the rest is byte for byte.
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        k: v for k, v in shown.items() if k != "messages"
    }
    assert sent["messages"][:-1] == shown["messages"][:-1]


def test_readme_think_json_example_is_real_output(workdir: Workdir, fake: FakeOpenAI) -> None:
    """The README's think --json example is what a no-push round prints, round id aside."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("`think --json` prints one object:")[1].split("```json")[1]
    example = json.loads(block.split("```")[0])
    fake.script("[我决定:no_push]")
    result = workdir.think_json()
    assert {**result, "round_id": "…"} == example


def test_help_shows_switches_as_switches(workdir: Workdir) -> None:
    """--help lists --dry-run and --json as plain switches, with no value placeholder."""
    out = workdir.cli("think", "--help").stdout
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("--")}
    assert "<bool>" not in out
    assert lines["--dry-run"].split()[1] != "BOOLEAN"


def test_model_failure_is_recorded(workdir: Workdir, fake: FakeOpenAI) -> None:
    """A 500 ends the round failed/model_error, exit 1, and the key never shows."""
    fake.script(Fail(500))
    proc = workdir.cli("think", "--json", check=False)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert (result["outcome"], result["reason"]) == ("failed", "model_error")
    assert "HTTP 500" in proc.stderr
    rounds = workdir.cli("rounds", "--json").stdout
    for text in (proc.stdout, proc.stderr, rounds):
        assert KEY not in text


def test_no_endpoint_says_what_is_missing(workdir: Workdir) -> None:
    """Without a base URL, think records a skipped round, spends nothing, and names the setting."""
    env = {k: v for k, v in workdir.env.items() if k != "BACKTHINK_MODEL__BASE_URL"}
    workdir.env = env
    proc = workdir.cli("think", check=False)
    assert proc.returncode == 1
    assert "skipped / no_model" in proc.stdout
    assert "no model endpoint configured: set model.base_url" in proc.stdout
    check = workdir.cli("check", check=False)
    assert check.returncode == 1
    assert check.stderr.strip().startswith("backthink: model: no model endpoint configured")
    assert "ok  database:" in check.stdout


def test_check_passes_against_endpoint(workdir: Workdir, fake: FakeOpenAI) -> None:
    """check validates config, prompts, database, endpoint and its use of tools."""
    fake.tools_mode = "call"
    out = workdir.cli("check").stdout
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "ok  config",
        "ok  prompts",
        "ok  channels",
        "ok  database",
        "ok  model",
        "ok  tools",
    ]


def test_import_is_all_or_nothing(workdir: Workdir) -> None:
    """A malformed line is reported with its number and nothing from the file is stored."""
    good = json.dumps({"role": "user", "text": "a", "at": "2026-11-30T08:00:00"})
    path = workdir.path / "in.jsonl"
    path.write_text(good + "\n\n{not json}\n", encoding="utf-8")
    proc = workdir.cli("messages", "import", str(path), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"backthink: {path}:3: not valid JSON")
    assert "Traceback" not in proc.stderr
    path.write_text(good + "\n" + json.dumps({"role": "user", "txt": "b"}) + "\n", encoding="utf-8")
    proc = workdir.cli("messages", "import", str(path), check=False)
    assert proc.stderr.strip() == f"backthink: {path}:2: text: Field required"
    out = workdir.cli("think", "--dry-run", "--json").stdout
    assert [m["role"] for m in json.loads(out)["messages"]] == ["system", "user"]
    path.write_text(good + "\n" + good.replace('"a"', '"b"') + "\n", encoding="utf-8")
    assert workdir.cli("messages", "import", str(path)).stdout.startswith("imported 2 messages")


def test_bad_config_exits_2(workdir: Workdir) -> None:
    """A wrong key exits 2 with one line naming it."""
    workdir.write_config(gate={"daily_kap": 3})
    proc = workdir.cli("rounds", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"backthink: {workdir.config}: gate.daily_kap: unknown key (did you mean daily_cap?)"
    )


def test_bad_role_is_a_usage_error(workdir: Workdir) -> None:
    """messages add rejects an unknown role with a clear line."""
    proc = workdir.cli("messages", "add", "--role", "robot", "--text", "x", check=False)
    assert proc.returncode == 2
    assert "role: must be one of user, assistant, system" in proc.stderr


def test_memory_commands_add_list_search_and_forget(workdir: Workdir) -> None:
    """memory add/list/search/forget work on the configured database, JSON included."""
    assert workdir.cli("memory", "add", "我妹妹下周六钢琴比赛").stdout == "added memory 1\n"
    workdir.cli("memory", "add", "allergic to peanuts", "--kind", "profile")
    listed = json.loads(workdir.cli("memory", "list", "--json").stdout)
    assert [(m["id"], m["kind"], m["text"]) for m in listed] == [
        (2, "profile", "allergic to peanuts"),
        (1, "note", "我妹妹下周六钢琴比赛"),
    ]
    assert listed[0]["source"] == "cli" and listed[0]["created_at"].endswith("+00:00")
    profile = json.loads(workdir.cli("memory", "list", "--kind", "profile", "--json").stdout)
    assert [m["id"] for m in profile] == [2]
    found = json.loads(workdir.cli("memory", "search", "钢琴", "--json").stdout)
    assert [(m["id"], m["kind"], m["text"]) for m in found] == [(1, "note", "我妹妹下周六钢琴比赛")]
    assert set(found[0]) >= {"id", "kind", "text", "created_at"}
    assert "钢琴比赛" in workdir.cli("memory", "search", "钢琴比赛").stdout
    assert workdir.cli("memory", "forget", "1").stdout == "forgot memory 1\n"
    assert json.loads(workdir.cli("memory", "search", "钢琴", "--json").stdout) == []
    assert workdir.cli("memory", "list").stdout.splitlines()[0].startswith("2  ")


def test_forgetting_a_missing_memory_is_exit_1_with_one_line(workdir: Workdir) -> None:
    """memory forget of an id nobody has fails with one clear line and exit code 1."""
    proc = workdir.cli("memory", "forget", "42", check=False)
    assert proc.returncode == 1
    assert proc.stderr == "backthink: no memory 42 for owner 'o'\n"


def test_memory_add_refuses_a_thought_kind(workdir: Workdir) -> None:
    """Thoughts are the rounds' own: memory add --kind thought is a usage error (exit 2)."""
    proc = workdir.cli("memory", "add", "x", "--kind", "thought", check=False)
    assert proc.returncode == 2
    assert json.loads(workdir.cli("memory", "list", "--json").stdout) == []


def test_messages_add_reads_stdin_refuses_empty_text_and_takes_owner(workdir: Workdir) -> None:
    """`--text -` reads the text from stdin; an empty text is refused; `--owner` works here too."""
    long = "第一段。\n" + "很长的一段话。" * 3000
    workdir.cli("messages", "add", "--role", "user", "--text", "-", "--owner", "o", stdin=long)
    empty = workdir.cli("messages", "add", "--role", "user", "--text", "  ", check=False)
    assert empty.returncode == 2
    assert empty.stderr.strip() == "backthink: messages add: text: empty (give a text, or an image)"
    other = workdir.cli("messages", "add", "--role", "user", "--text", "x", "--owner", "nobody",
                        check=False)  # fmt: skip
    assert other.returncode == 2 and "unknown owner 'nobody'" in other.stderr
    dry = json.loads(workdir.cli("think", "--dry-run", "--json", "--owner", "o").stdout)
    assert any(m["content"].startswith("第一段。\n很长的一段话。") for m in dry["messages"])
