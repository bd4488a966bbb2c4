"""The processes of the tier, wired as an owner would wire them, each on a free loopback port.

    Open WebUI ──> tap ──> backthink (relay) ──> fake upstream
        ^                        │ (rounds) ───────────^
        └── its Channel's webhook <── webhook channel push

The fake upstream answers the relay and backthink's own rounds; the tap
records what Open WebUI sent the relay; backthink runs as `backthink run`
with its config in a temporary folder and delivers pushes into an Open WebUI
Channel through a webhook channel whose `url` is the Channel's incoming
webhook URL as Open WebUI shows it (docs/api.md).
"""

from __future__ import annotations

import json
import os
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from conftest import DETECT_PORTS, NO_SERVER_PORT, DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI

from .openwebui import Browser, OpenWebUI
from .replies import CHAT_MODEL, ROUND_MODEL, Replies
from .tap import Tap

OWNER = "o"
WAIT_S = 60.0  # seconds anything of backthink's may take on a loaded machine
POLL_S = 0.1  # seconds between two looks at something under way
# Every gate value, stated: no outcome depends on the hour, and the companion may
# push right after a chat (the owner "away" is the story's doing, not the clock's).
GATE: dict[str, object] = {
    "quiet_hours": "",
    "quiet_mode": "critical_only",
    "activity_window": "0s",
    "min_interval": "0s",
    "daily_cap": 20,
    "max_unanswered": 20,
    "max_body_chars": 600,
    "duplicate_window": "24h",
    "default_channel": "web",
}
PUSH_CHANNEL = "openwebui"
"""backthink's name for the webhook channel that posts into the Open WebUI Channel."""


def backthink_config(fake: FakeOpenAI, push_url: str | None) -> str:
    """The config sections beside Workdir's own: the relay, rounds on the fake, the channels."""
    channel = (
        f'\n[channels.{PUSH_CHANNEL}]\ntype = "webhook"\nurl = "{push_url}"\n' if push_url else ""
    )
    return f"""
[schedule]
heartbeat = "1h"
jitter = "0s"
startup_greeting = false
skip_unchanged = false

[model]
base_url = "{fake.base_url}"
api_key = "sk-round-key"
name = "{ROUND_MODEL}"
max_retries = 0
timeout_s = 30

[api]
listen = "127.0.0.1:0"

[relay]
upstream = "{fake.base_url}"
api_key = "sk-upstream-key"

[channels.web]
type = "web"
{channel}"""


@dataclass
class Stack:
    """Everything running, and the handles a story needs."""

    fake: FakeOpenAI
    replies: Replies
    tap: Tap
    workdir: Workdir
    daemon: DaemonProcess
    relay_url: str
    token: str
    openwebui: OpenWebUI
    browser: Browser
    channel_id: str
    folder: Path
    model: dict[str, Any] = field(default_factory=dict)
    """The relay's model as Open WebUI lists it (`/api/models`), once the page has loaded."""

    def relay_calls(self) -> int:
        """The chat completions Open WebUI sent the relay so far."""
        return sum(
            1 for r in self.tap.records if r.method == "POST" and r.path == "/v1/chat/completions"
        )

    def finished_calls(self) -> int:
        """The relay's `relay.finished` lines so far (read without waiting)."""
        while True:
            try:
                self.daemon.seen.append(self.daemon.lines.get_nowait())
            except queue.Empty:
                break
        return sum(1 for e in self.daemon.seen if e.get("event") == "relay.finished")

    def settled(self) -> bool:
        """Nothing under way: every tapped call answered and finished by the relay."""
        return self.tap.open_calls == 0 and self.finished_calls() >= self.relay_calls()

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Wait until `done()` holds.

        Raises:
            AssertionError: it did not within `timeout_s`; names `what`.
        """
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def load_page(self) -> None:
        """Load Open WebUI's page: it lists the models, which asks the relay's `/v1/models`."""

        def offered() -> bool:
            found = [m for m in self.browser.models() if m["id"] == CHAT_MODEL]
            self.model = found[0] if found else {}
            return bool(found)

        self.wait("Open WebUI offers the relay's model", offered)

    def api(self, path: str) -> Any:
        """GET a path of backthink's API as the owner (a client of its own, not the front-end)."""
        answer = httpx2.get(
            f"{self.relay_url}{path}",
            headers={"authorization": f"Bearer {self.token}"},
            timeout=WAIT_S,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    def session(self, *, everything: bool = True) -> list[dict[str, Any]]:
        """The owner's session: with `everything`, superseded messages too (`?all=1`)."""
        query = "all=1&limit=1000" if everything else "limit=1000"
        found: list[dict[str, Any]] = self.api(f"/v1/messages?{query}")["messages"]
        return found

    def poke(self, why: str) -> dict[str, Any]:
        """`backthink poke WHY`: a round now, through the running daemon; its summary."""
        proc = self.workdir.cli("poke", why)
        found: dict[str, Any] = json.loads(proc.stdout)
        return found


def backthink_env(folder: Path) -> dict[str, str]:
    """The environment of backthink's processes: private folders, no model servers looked for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    env["XDG_CONFIG_HOME"] = str(folder / "xdg-config")
    env["XDG_STATE_HOME"] = str(folder / "xdg-state")
    env[DETECT_PORTS] = NO_SERVER_PORT
    return env


@contextmanager
def running_stack(executable: Path, folder: Path) -> Iterator[Stack]:
    """Start the fake, the tap, Open WebUI and backthink; stop them all on the way out."""
    replies = Replies()
    with ExitStack() as stop:
        fake = stop.enter_context(FakeOpenAI(model_ids=[CHAT_MODEL]))
        fake.responder = replies
        tap = stop.enter_context(Tap())
        (folder / "backthink").mkdir()
        workdir = Workdir(folder / "backthink", backthink_env(folder))
        workdir.write_config(backthink_config(fake, None), gate=GATE)
        token = workdir.cli("owners", "token", OWNER).stdout.strip()

        openwebui = OpenWebUI(
            executable, folder / "open-webui", openai_base_url=f"{tap.base_url}/v1", api_key=token
        )
        stop.callback(openwebui.stop)
        openwebui.start()
        browser = Browser(openwebui.url)
        stop.callback(browser.close)
        channel_id, hook = browser.channel_with_webhook("companion")
        push_url = f"{openwebui.url}{hook}"

        workdir.write_config(backthink_config(fake, push_url), gate=GATE)
        daemon = DaemonProcess(workdir, dict(workdir.env))
        stop.callback(daemon.stop)
        relay_url = str(daemon.wait_for("api.ready", timeout_s=WAIT_S)["url"]).rstrip("/")
        tap.target = relay_url

        yield Stack(
            fake=fake,
            replies=replies,
            tap=tap,
            workdir=workdir,
            daemon=daemon,
            relay_url=relay_url,
            token=token,
            openwebui=openwebui,
            browser=browser,
            channel_id=channel_id,
            folder=folder,
        )
