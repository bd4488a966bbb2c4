"""The doors as a user meets them: `backthink run` with [api] on a free port, real clients.

The openai SDK chats through the relay, a real SSE client holds /v1/events
open, `backthink poke heartbeat` runs the heartbeat round, the fake endpoint
answers both the relay and the rounds, and a webhook receiver stands for the
owner's phone.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import openai
import pytest
from conftest import DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Reply
from support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.slow

WAIT_S = 30.0  # seconds anything may take on a loaded machine
FIRST_PUSH = "考完记得好好休息，晚上想吃点什么？"
SECOND_PUSH = "明天的组会材料准备好了吗？"


def configure(workdir: Workdir, receiver: WebhookReceiver) -> str:
    """Write the config ([api] on, web and a webhook phone), make o's token and return it."""
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
    return workdir.cli("owners", "token", "o").stdout.strip()


def start(workdir: Workdir) -> tuple[DaemonProcess, str]:
    """Start the daemon; return it and the API's URL."""
    daemon = DaemonProcess(workdir, dict(workdir.env))
    url = str(daemon.wait_for("api.ready")["url"])
    return daemon, url


@contextmanager
def event_stream(url: str, token: str) -> Iterator[queue.Queue[Any]]:
    """A real SSE client reading /v1/events in a thread; its events arrive on the queue.

    Leaving the block hangs up as a closed app does: the socket is shut down, so the
    daemon sees the stream close at once, not at its next keep-alive write.
    """
    events: queue.Queue[Any] = queue.Queue()
    client = httpx2.Client(headers={"authorization": f"Bearer {token}"}, timeout=None)
    opened: list[httpx2.Response] = []

    def read() -> None:
        try:
            headers = {"accept": "text/event-stream", "cache-control": "no-store"}
            with client.stream("GET", f"{url}v1/events", headers=headers) as response:
                opened.append(response)
                for event in httpx2.EventSource(response):
                    events.put(event)
        except httpx2.HTTPError as exc:
            events.put(exc)  # closed under it: the test is done with it

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield events
    finally:
        for response in opened:
            stream = response.extensions["network_stream"]
            with contextlib.suppress(OSError):
                stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        client.close()
        reader.join(WAIT_S)


def session(workdir: Workdir) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(workdir.cli("messages", "list", "--json").stdout)[
        "messages"
    ]
    return messages


def test_a_chat_front_end_becomes_a_companion(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """Chat via the relay; the heartbeat sees it; its push reaches the stream, then the phone."""
    token = configure(workdir, receiver)
    daemon, url = start(workdir)
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
        # Each call's line is written once its turn and reply are in the session.
        daemon.wait_for("relay.finished", count=3, timeout_s=WAIT_S)
        assert len(session(workdir)) == 6

        with event_stream(url, token) as events:
            daemon.wait_for("api.stream_opened", timeout_s=WAIT_S)
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
        daemon.wait_for("api.stream_closed", timeout_s=WAIT_S)
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


def test_a_round_outside_the_daemon_asks_it_whether_anyone_watches(
    workdir: Workdir, fake: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    """`think` with [api] on: the session channel counts only while the daemon has a watcher."""
    token = configure(workdir, receiver)
    workdir.cli("messages", "add", "--role", "user", "--text", "在吗")

    def think(text: str) -> str:
        fake.script(f"[decision:push]\n[urgency:routine]\n{text}")
        round_ = workdir.think_json()
        assert round_["outcome"] == "delivered", round_
        return str(round_["reason"])

    # No daemon: nobody can be watching the session, so the push goes to the phone.
    assert think("没有人在看") == "phone"
    assert receiver.wait_for(1)[0].json["text"] == "没有人在看"
    daemon, url = start(workdir)
    try:
        with event_stream(url, token):
            daemon.wait_for("api.stream_opened", timeout_s=WAIT_S)
            assert think("有人在看") == "web"
        daemon.wait_for("api.stream_closed", timeout_s=WAIT_S)
        assert think("又没人了") == "phone"
    finally:
        assert daemon.stop() == 0
    assert [r.json["text"] for r in receiver.wait_for(2)] == ["没有人在看", "又没人了"]


def test_a_stop_with_a_relayed_stream_open_is_clean(workdir: Workdir, fake: FakeOpenAI) -> None:
    """SIGTERM mid-stream: the client gets an error event and a clean end; no error is logged."""
    workdir.write_config('[api]\nlisten = "127.0.0.1:0"\n[schedule]\nstartup_greeting = false')
    daemon, url = start(workdir)
    fake.script(Reply("一段很慢的回答", stream_delay_s=WAIT_S))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "慢慢说"}]}
    try:
        with (
            httpx2.Client(timeout=WAIT_S) as client,
            client.stream("POST", f"{url}v1/chat/completions", json=body) as answer,
        ):
            lines = answer.iter_lines()
            assert next(lines).startswith("data: ")  # the first chunk is through
            assert daemon.stop() == 0
            rest = [line for line in lines if line]
    finally:
        daemon.stop()
    assert rest and json.loads(rest[-1].removeprefix("data: "))["error"]["code"] == 503
    daemon.wait_for("daemon.stopped")
    assert not [e for e in daemon.seen if e.get("level") in ("error", "critical")], daemon.raw
    assert "Traceback" not in "".join(daemon.raw)


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
