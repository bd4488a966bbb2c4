"""Open WebUI as its owner meets it: the real server in a process, driven as its browser drives it.

`OpenWebUI` runs `open-webui serve` from its own virtual environment on a free
loopback port, offline, with a fresh data folder. `Browser` makes the HTTP
requests Open WebUI's own front-end makes (`src/lib/components/chat/Chat.svelte`
and `Messages.svelte` of 0.12.4): a typed message, a regenerate and an edit are
each one `POST /api/chat/completions` with the fields the page sends, its
default background tasks included; the server keeps the chat and builds the
upstream request from its database. A turn is done when the chat has no task
left running (`GET /api/tasks/chat/{id}`, what the page asks when it loads a
chat) and its reply is stored done, with the title and tags on a first turn.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

VERSION = "0.12.4"
HOST = "127.0.0.1"
READY_TIMEOUT_S = 240.0  # seconds for a first start on a loaded two-core machine (~30-60 s alone)
STOP_TIMEOUT_S = 20.0  # seconds between SIGTERM and SIGKILL
REQUEST_TIMEOUT_S = 60.0  # seconds for one request to Open WebUI
TURN_TIMEOUT_S = 120.0  # seconds for a turn and its background tasks
POLL_S = 0.25  # seconds between two looks at a chat that is still working
LOG_TAIL_CHARS = 6000
# The page's prompt variables, fixed: the date never decides what a test sees.
PROMPT_VARIABLES = {
    "{{USER_EMAIL}}": "admin@localhost",
    "{{USER_LOCATION}}": "Unknown",
    "{{CURRENT_DATETIME}}": "2026-12-06 10:00:00",
    "{{CURRENT_DATE}}": "2026-12-06",
    "{{CURRENT_TIME}}": "10:00:00",
    "{{CURRENT_WEEKDAY}}": "Sunday",
    "{{CURRENT_TIMEZONE}}": "Asia/Shanghai",
    "{{USER_LANGUAGE}}": "en-US",
}


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class OpenWebUI:
    """`open-webui serve` in a process of its own, offline, on a free loopback port."""

    def __init__(self, executable: Path, folder: Path, *, openai_base_url: str, api_key: str):
        """Prepare a server whose one connection is `openai_base_url` with `api_key`."""
        self.executable = executable
        self.folder = folder
        self.port = free_port()
        self.log_path = folder / "open-webui.log"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "home").mkdir(exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(folder / "home"),
            "LANG": "C.UTF-8",
            "DATA_DIR": str(folder / "data"),
            "WEBUI_SECRET_KEY": "frontends-tier-secret",
            "OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "ENABLE_OLLAMA_API": "false",
            "WEBUI_AUTH": "false",
            "RAG_EMBEDDING_ENGINE": "openai",
            "ENABLE_CHANNELS": "true",
            "OPENAI_API_BASE_URL": openai_base_url,
            "OPENAI_API_KEY": api_key,
            # Nothing leaves the machine: no telemetry from its libraries either.
            "ANONYMIZED_TELEMETRY": "false",
            "DO_NOT_TRACK": "true",
            "SCARF_NO_ANALYTICS": "true",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its address, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> OpenWebUI:
        """Start it and wait until `/ready` answers 200.

        Raises:
            RuntimeError: it exited or was not ready in time; the message ends with its log.
        """
        command = [str(self.executable), "serve", "--host", HOST, "--port", str(self.port)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=self.folder,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx2.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"open-webui exited {self.proc.returncode}\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx2.HTTPError):
                    if client.get(f"{self.url}/ready").status_code == 200:
                        return self
                time.sleep(1.0)
        self.stop()
        raise RuntimeError(
            f"open-webui was not ready in {READY_TIMEOUT_S:.0f} s\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """SIGTERM to the process group it leads, SIGKILL after STOP_TIMEOUT_S."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)

    def log_tail(self) -> str:
        """The end of its log, for a failure message."""
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"


@dataclass
class Turn:
    """One user message and the reply Open WebUI stored for it."""

    chat_id: str
    user_id: str
    """The user message's id in Open WebUI."""
    reply_id: str
    parent_id: str | None
    text: str
    reply: str = ""


@dataclass
class Chat:
    """A chat as the page holds it: its id and the ids of the branch on screen."""

    id: str
    turns: list[Turn] = field(default_factory=list)


class Browser:
    """The HTTP requests Open WebUI's page makes, as the signed-in (single, admin) user."""

    def __init__(self, url: str) -> None:
        """Sign in as the page does with WEBUI_AUTH off, and load what the page loads."""
        self.client = httpx2.Client(base_url=url, timeout=REQUEST_TIMEOUT_S)
        answer = self._json(
            self.client.post("/api/v1/auths/signin", json={"email": "", "password": ""})
        )
        self.client.headers["authorization"] = f"Bearer {answer['token']}"
        self.user: dict[str, Any] = {"id": answer["id"], "name": answer["name"]}
        self.config: dict[str, Any] = self._json(self.client.get("/api/config"))
        # One socket.io session per open page; events go to the user's room whatever it is.
        self.session_id = uuid.uuid4().hex[:20]

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    @staticmethod
    def _json(answer: httpx2.Response) -> Any:
        if answer.status_code != 200:
            raise AssertionError(f"{answer.request.url}: {answer.status_code} {answer.text[:500]}")
        return answer.json()

    def get(self, path: str) -> Any:
        """GET a path of Open WebUI's API; fail on anything but 200."""
        return self._json(self.client.get(path))

    def post(self, path: str, body: Any) -> Any:
        """POST a JSON body to a path of Open WebUI's API; fail on anything but 200."""
        return self._json(self.client.post(path, json=body))

    def models(self) -> list[dict[str, Any]]:
        """`GET /api/models`, as the page does on load (Open WebUI asks the relay's /v1/models)."""
        data: list[dict[str, Any]] = self.get("/api/models")["data"]
        return data

    def _features(self) -> dict[str, Any]:
        """`getFeatures()` of the page at its defaults."""
        features = self.config.get("features") or {}
        found: dict[str, Any] = {
            "voice": False,
            "image_generation": False,
            "code_interpreter": False,
            "web_search": False,
        }
        if features.get("enable_memories"):
            found["memory"] = True
        return found

    def send(
        self,
        model: dict[str, Any],
        text: str,
        *,
        chat: Chat | None,
        parent: Turn | None,
        regenerate: Turn | None = None,
    ) -> Turn:
        """Type `text` (or regenerate a turn's reply) and send it, as the page's sendMessage does.

        `chat` None starts a new chat; `parent` is the turn whose reply the new
        message follows (None: the chat's first message); `regenerate` sends that
        turn's stored user message again with a new reply id.
        """
        reply_id = str(uuid.uuid4())
        children = [reply_id]
        if regenerate is not None:
            user_id, parent_id = regenerate.user_id, regenerate.parent_id
            children.insert(0, regenerate.reply_id)
        else:
            user_id, parent_id = str(uuid.uuid4()), parent.reply_id if parent else None
        user_message = {
            "id": user_id,
            "parentId": parent_id,
            "childrenIds": children,
            "role": "user",
            "user": dict(self.user),
            "user_id": self.user["id"],
            "content": text,
            "timestamp": 1796522400,
            "models": [model["id"]],
        }
        tasks: dict[str, bool] = {"follow_up_generation": True}
        # The page asks for a title and tags when the message opens its chat's history.
        if chat is None or parent_id is None:
            tasks = {"title_generation": True, "tags_generation": True, **tasks}
        body: dict[str, Any] = {
            "stream": True,
            "model": model["id"],
            "params": {"model_controls": {}},
            "tool_ids": [],
            "tool_servers": [],
            "features": self._features(),
            "variables": {"{{USER_NAME}}": self.user["name"], **PROMPT_VARIABLES},
            "model_item": model,
            "session_id": self.session_id,
            "id": reply_id,
            "message_ids": [{"model_id": model["id"], "message_id": reply_id, "modelIdx": 0}],
            "parent_id": parent_id,
            "user_message": user_message,
            "background_tasks": tasks,
        }
        if chat is None:
            body["chat_variables"] = {}
        else:
            body["chat_id"] = chat.id
        answer = self.post("/api/chat/completions", body)
        chat_id = str(answer["chat_id"])
        return Turn(chat_id, user_id, reply_id, parent_id, text)

    def wait_turn(self, turn: Turn, *, first: bool, seen: Callable[[], bool]) -> Turn:
        """Wait until the turn is done as the page sees it, and `seen()` holds; fill its reply.

        Raises:
            AssertionError: not done within TURN_TIMEOUT_S, or the reply carries an error.
        """
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while time.monotonic() < deadline:
            tasks = self.get(f"/api/tasks/chat/{turn.chat_id}")["task_ids"]
            chat = self.get(f"/api/v1/chats/{turn.chat_id}")
            reply = chat["chat"]["history"]["messages"].get(turn.reply_id) or {}
            if reply.get("error"):
                raise AssertionError(f"Open WebUI stored an error for the reply: {reply['error']}")
            titled = not first or (chat["title"] != "New Chat" and chat["meta"].get("tags"))
            if not tasks and reply.get("done") and titled and seen():
                turn.reply = str(reply.get("content") or "")
                return turn
            time.sleep(POLL_S)
        raise AssertionError(f"the turn {turn.text!r} was not done in {TURN_TIMEOUT_S:.0f} s")

    def chat(self, chat_id: str) -> dict[str, Any]:
        """`GET /api/v1/chats/{id}`: the chat as Open WebUI stores it."""
        found: dict[str, Any] = self.get(f"/api/v1/chats/{chat_id}")
        return found

    def enable_autocomplete(self) -> None:
        """Turn autocomplete on: the admin's Interface settings, then the owner's own setting.

        The message box asks only when both are on (the user setting
        `promptAutocomplete` is off by default too).
        """
        config = self.get("/api/v1/tasks/config")
        self.post("/api/v1/tasks/config/update", {**config, "ENABLE_AUTOCOMPLETE_GENERATION": True})
        self.post("/api/v1/users/user/settings/update", {"ui": {"promptAutocomplete": True}})

    def autocomplete(self, model: dict[str, Any], prompt: str, chat: Chat) -> Any:
        """What the message box asks while the owner types: the text so far and the branch shown."""
        history = self.chat(chat.id)["chat"]["history"]
        branch: list[dict[str, Any]] = []
        current = history["currentId"]
        while current is not None and current in history["messages"]:
            branch.insert(0, history["messages"][current])
            current = history["messages"][current]["parentId"]
        body = {
            "model": model["id"],
            "prompt": prompt,
            "messages": branch,
            "type": "general",
            "stream": False,
        }
        return self.post("/api/v1/tasks/auto/completions", body)

    def channel_with_webhook(self, name: str) -> tuple[str, str]:
        """Create a channel and an incoming webhook on it: the channel id and the webhook's path."""
        channel = self.post("/api/v1/channels/create", {"name": name, "type": None})
        hook = self.post(f"/api/v1/channels/{channel['id']}/webhooks/create", {"name": "backthink"})
        return str(channel["id"]), f"/api/v1/channels/webhooks/{hook['id']}/{hook['token']}"

    def channel_messages(self, channel_id: str) -> list[Mapping[str, Any]]:
        """The channel's messages, newest first, as the channel page reads them."""
        found: list[Mapping[str, Any]] = self.get(f"/api/v1/channels/{channel_id}/messages")
        return found
