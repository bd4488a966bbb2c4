"""The doors as a user meets them: `backthink run` with [api] on a free port, real clients.

The openai SDK chats through the relay, a real SSE client holds /v1/events
open, `backthink poke heartbeat` runs the heartbeat round, the fake endpoint
answers both the relay and the rounds, and a webhook receiver stands for the
owner's phone.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import openai
import pytest
from conftest import DaemonProcess, Workdir
from fake_openai import FakeOpenAI
from webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.slow

WAIT_S = 30.0  # seconds anything may take on a loaded machine
FIRST_PUSH = "考完记得好好休息，晚上想吃点什么？"
SECOND_PUSH = "明天的组会材料准备好了吗？"


def start(workdir: Workdir, receiver: WebhookReceiver) -> tuple[DaemonProcess, str, str]:
    """Write the config, make o's token, start the daemon; return it, its URL and the token."""
    workdir.write_config(
        f"""
[schedule]
heartbeat = "1h"
startup_greeting = false

[api]
listen = "127.0.0.1:0"

[channels.web]
type = "web"

[channels.phone]
type = "webhook"
url = "{receiver.url_for("/hook")}"
timeout_s = 5
""",
        gate={
            "default_channel": "phone",
            "min_interval": "0s",
            "activity_window": "0s",
            "max_unanswered": 10,
        },
    )
    token = workdir.cli("owners", "token", "o").stdout.strip()
    daemon = DaemonProcess(workdir, dict(workdir.env))
    url = str(daemon.wait_for("api.ready")["url"])
    return daemon, url, token


@contextmanager
def event_stream(url: str, token: str) -> Iterator[queue.Queue[Any]]:
    """A real SSE client reading /v1/events in a thread; its events arrive on the queue."""
    events: queue.Queue[Any] = queue.Queue()
    client = httpx2.Client(headers={"authorization": f"Bearer {token}"}, timeout=None)

    def read() -> None:
        try:
            with client.sse(f"{url}v1/events") as source:
                for event in source:
                    events.put(event)
        except httpx2.HTTPError as exc:
            events.put(exc)  # closed under it: the test is done with it

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield events
    finally:
        client.close()
        reader.join(WAIT_S)


def web_channel(url: str, token: str) -> str:
    """The session channel's health as the running daemon sees it (reading status is no visit)."""
    answer = httpx2.get(
        f"{url}v1/status", headers={"authorization": f"Bearer {token}"}, timeout=WAIT_S
    )
    return str(answer.json()["channels"]["web"])


def wait_for_web(url: str, token: str, health: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while web_channel(url, token) != health:
        assert time.monotonic() < deadline, f"the web channel never became {health}"
        time.sleep(0.05)


def session(workdir: Workdir) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(workdir.cli("messages", "list", "--json").stdout)[
        "messages"
    ]
    return messages


def test_a_chat_front_end_becomes_a_companion(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """Chat via the relay; the heartbeat sees it; its push reaches the stream, then the phone."""
    daemon, url, token = start(workdir, receiver)
    try:
        chat = openai.OpenAI(base_url=f"{url}v1", api_key=token, max_retries=0, timeout=WAIT_S)
        history: list[Any] = [{"role": "system", "content": "你是昔涟。"}]

        def say(text: str, reply: str, *, stream: bool = False) -> list[Any]:
            fake.script(reply)
            history.append({"role": "user", "content": text})
            if stream:
                parts = chat.chat.completions.create(model="m", messages=history, stream=True)
                got = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
            else:
                answer = chat.chat.completions.create(model="m", messages=history)
                got = answer.choices[0].message.content or ""
            assert got == reply
            history.append({"role": "assistant", "content": reply})
            forwarded: list[Any] = fake.chat_requests[-1].body["messages"]
            return forwarded

        say("今天考完试了", "辛苦啦！考得怎么样？")
        say("还不错，就是好累", "那今晚早点睡吧。", stream=True)
        say("嗯，明天还有组会", "组会加油！")
        deadline = time.monotonic() + WAIT_S
        while len(session(workdir)) < 6:
            assert time.monotonic() < deadline, "the relay did not keep the conversation"
            time.sleep(0.1)

        with event_stream(url, token) as events:
            wait_for_web(url, token, "ok")
            fake.script(f"想关心一下。\n[decision:push]\n[urgency:routine]\n{FIRST_PUSH}")
            round_ = json.loads(workdir.cli("poke", "heartbeat").stdout)
            assert (round_["outcome"], round_["reason"]) == ("delivered", "web")
            # The heartbeat's request held the chat turns, the replies included.
            said = [m["content"] for m in fake.chat_requests[-1].body["messages"]]
            for text in ("今天考完试了", "那今晚早点睡吧。", "嗯，明天还有组会", "组会加油！"):
                assert any(text in str(content) for content in said), text
            event = events.get(timeout=WAIT_S)
            assert event.event == "push"
            assert event.json()["text"] == FIRST_PUSH
            assert event.json()["channel"] == "web" and event.json()["delivery"] == "delivered"

        # The next turn shows the model the push, right before the owner's answer to it.
        forwarded = say("谢谢，想吃火锅", "好呀，注意别吃太辣。")
        assert forwarded[-2:] == [
            {"role": "assistant", "content": FIRST_PUSH},
            {"role": "user", "content": "谢谢，想吃火锅"},
        ]
        assert forwarded[:-2] == history[:-2]

        # No stream open, no recent read: the push goes to the phone instead.
        wait_for_web(url, token, "down")
        fake.script(f"[decision:push]\n[urgency:routine]\n{SECOND_PUSH}")
        round_ = json.loads(workdir.cli("poke", "heartbeat").stdout)
        assert (round_["outcome"], round_["reason"]) == ("delivered", "phone")
        (request,) = receiver.wait_for(1)
        assert request.json["text"] == SECOND_PUSH
        pushes = [m for m in session(workdir) if m["origin"] == "proactive"]
        assert [(m["text"], m["channel"], m["delivery"]) for m in pushes] == [
            (FIRST_PUSH, "web", "delivered"),
            (SECOND_PUSH, "phone", "delivered"),
        ]
    finally:
        assert daemon.stop() == 0
    relayed = [e for e in daemon.seen if e.get("event") == "relay.finished"]
    daemon.wait_for("daemon.stopped")
    log = "".join(daemon.raw)
    # The relay counts and times its calls, and never logs what was said.
    assert "谢谢，想吃火锅" not in log and "好呀" not in log
    assert all("latency_ms" in e for e in relayed)


def test_a_public_api_without_tokens_is_refused_at_start(workdir: Workdir) -> None:
    """`run` with a non-loopback api.listen and no owner's token exits 2 with one clear line."""
    workdir.env["BACKTHINK_API__LISTEN"] = "0.0.0.0:0"
    workdir.env["BACKTHINK_DAEMON__SOCKET"] = str(workdir.path / "bt.sock")
    proc = workdir.cli("run", check=False)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("backthink:")]
    assert len(lines) == 1 and "owners token" in lines[0], proc.stderr


def test_daemon_without_api_does_not_import_it() -> None:
    """With [api] off, the daemon and the command line load none of the API's modules."""
    import subprocess
    import sys

    code = (
        "import sys, backthink.host.daemon, backthink.cli.root, backthink.cli.process\n"
        "print(sorted(m for m in sys.modules if m.startswith(('backthink.api', 'httpx2'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"
