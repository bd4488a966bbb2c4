"""Delivery as a user meets it: real processes, a real webhook receiver, a kill mid-send."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from conftest import DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from support.webhook_receiver import WebhookReceiver

from backthink.delivery.channels import verify

SECRET = "hook-secret-abcdef"
PUSH = "先想一想。\n[我决定:push]\n[紧急:warning]\n组会加油，你准备得很充分了。"
BODY = "组会加油，你准备得很充分了。"


def with_webhook(
    workdir: Workdir,
    receiver: WebhookReceiver,
    extra: str = "",
    gate: dict[str, object] | None = None,
) -> None:
    workdir.write_config(
        gate=gate,
        extra=f"""
[channels.web]
type = "web"

[channels.phone]
type = "webhook"
url = "{receiver.url_for("/hook")}"
secret = "{SECRET}"
timeout_s = 5
{extra}""",
    )
    workdir.cli(
        "messages", "add", "--role", "user", "--text", "明天组会", "--channel", "phone",
        "--at", "2026-11-29T22:00:00+08:00",
    )  # fmt: skip


def proactive(workdir: Workdir) -> list[dict[str, object]]:
    out = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    return [m for m in out["messages"] if m["role"] == "assistant"]


def test_push_reaches_the_webhook_signed_and_is_written_back(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """The owner's last channel gets one signed POST; the main session gets the message."""
    with_webhook(workdir, receiver)
    fake.script(PUSH)
    result = workdir.think_json()
    assert (result["outcome"], result["reason"], result["channel"]) == (
        "delivered",
        "phone",
        "phone",
    )
    (request,) = receiver.wait_for(1)
    assert request.path == "/hook"
    assert request.header("idempotency-key") == result["round_id"]
    assert request.header("content-type") == "application/json"
    signature = request.header("x-backthink-signature") or ""
    assert verify(request.body, SECRET, signature)
    assert not verify(request.body + b" ", SECRET, signature)
    assert request.json["text"] == BODY
    assert request.json["urgency"] == "warning"
    assert request.json["persona"] == {"id": "cyrene", "name": "昔涟"}
    assert "先想一想" not in request.body.decode()
    assert [m["content"] for m in proactive(workdir)] == [BODY]
    # The next round sees its own message, attributed to itself.
    fake.script("[我决定:no_push]")
    workdir.think_json()
    history = fake.chat_requests[-1].body["messages"]
    assert {"role": "assistant", "content": BODY} in history


def test_channel_down_ends_failed_and_visible(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """A receiver answering 500 every time: retried, then failed/delivery_failed, in rounds."""
    # The phone is the only way to the owner: nothing else may take the message instead.
    with_webhook(workdir, receiver, gate={"default_channel": "phone"})
    receiver.script(500, 500, 500)
    fake.script(PUSH)
    proc = workdir.cli("think", "--json", check=False)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert (result["outcome"], result["reason"]) == ("failed", "delivery_failed")
    assert len(receiver.received) == 3
    assert receiver.unique_keys() == {result["round_id"]}
    table = workdir.cli("rounds").stdout
    assert "failed" in table and "delivery_failed" in table
    assert SECRET not in proc.stdout + proc.stderr + table


def test_kill_mid_send_then_restart_sends_once(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """A process killed mid-send loses nothing: the daemon resumes with the same key, once."""
    with_webhook(workdir, receiver)
    receiver.hang()
    fake.script(PUSH)
    proc = subprocess.Popen(
        [sys.executable, "-m", "backthink", "--config", str(workdir.config), "think", "--json"],
        cwd=workdir.path,
        env=workdir.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        (first,) = receiver.wait_for(1, timeout_s=30)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    receiver.release()
    key = first.header("idempotency-key")
    assert workdir.cli("rounds").stdout.strip() == "no rounds yet"

    env = dict(workdir.env, BACKTHINK_SCHEDULE__STARTUP_GREETING="false")
    daemon = DaemonProcess(workdir, env)
    try:
        receiver.wait_for(2, timeout_s=30)
    finally:
        exit_code = daemon.stop()
    assert exit_code == 0, "".join(daemon.raw)
    assert len(receiver.received) == 2
    assert receiver.unique_keys() == {key}
    assert receiver.received[1].body == first.body
    rounds = json.loads(workdir.cli("rounds", "--json").stdout)
    assert [(r["round_id"], r["outcome"], r["reason"]) for r in rounds] == [
        (key, "delivered", "phone")
    ]
    assert "delivery completed after a restart" in rounds[0]["notes"]
    assert [m["content"] for m in proactive(workdir)] == [BODY]
    assert len(fake.chat_requests) == 1
