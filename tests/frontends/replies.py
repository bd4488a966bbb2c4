"""What the fake upstream answers in this tier, decided by each request's own content.

Open WebUI's background tasks, its chat turns and backthink's own rounds all
reach the same fake endpoint, concurrently and in an order the tier does not
control; a queue of scripted replies would hand one caller's reply to
another. So every request is answered by what it is: a task by its kind
(valid JSON, so Open WebUI stores a title, tags and follow-ups), a chat turn
by the text of its last user message, a round (backthink's model name) by
the reply the test set for the next round.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

CHAT_MODEL = "fake-model"
"""The one model the fake lists, so the one Open WebUI offers."""
ROUND_MODEL = "backthink-round"
"""The model name of backthink's own rounds: the fake tells them from chat turns by it."""
TASK_MARK = "### Task:"
# The first words of Open WebUI 0.12.4's default task templates, after "### Task:".
TASK_OPENINGS = (
    ("Generate a concise title", "title_generation"),
    ("Generate 1-3 broad tags", "tags_generation"),
    ("Predict 3-5 useful messages", "follow_up_generation"),
    ("You are an autocompletion system", "autocomplete_generation"),
    (
        "Analyze the chat history to determine the necessity of generating search",
        "query_generation",
    ),
    ("Generate a detailed prompt for am image generation", "image_prompt_generation"),
)
TASK_REPLIES = {
    "title_generation": '{ "title": "考试之后" }',
    "tags_generation": '{ "tags": ["Education", "Wellbeing"] }',
    "follow_up_generation": '{ "follow_ups": ["明天几点开会？", "帮我列一下材料提纲"] }',
    "autocomplete_generation": '{ "text": "火锅" }',
    "query_generation": '{ "queries": [] }',
    "image_prompt_generation": '{ "prompt": "" }',
}
NO_PUSH = "[decision:no_push]"
DEFAULT_CHAT_REPLY = "嗯嗯，我在听。"


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def last_user_text(messages: Sequence[Any]) -> str:
    """The text of the last user message of a chat request ("" when there is none)."""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def task_of(body: Any) -> str | None:
    """Which Open WebUI task a chat request is (its name), or None for a chat turn.

    A task is one user message starting with "### Task:"; an unknown template
    is "unknown_task" rather than a turn.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
        return None
    users = [m for m in body["messages"] if isinstance(m, Mapping) and m.get("role") == "user"]
    if len(users) != 1:
        return None
    text = _text(users[0].get("content")).lstrip()
    if not text.startswith(TASK_MARK):
        return None
    rest = text.removeprefix(TASK_MARK).lstrip()
    return next(
        (name for opening, name in TASK_OPENINGS if rest.startswith(opening)), "unknown_task"
    )


class Replies:
    """The fake endpoint's responder: a reply for each request from what it is."""

    def __init__(self) -> None:
        """Start with no scripted chat replies and silent rounds."""
        self._lock = threading.Lock()
        self._chat: dict[str, deque[str]] = {}
        self._rounds: deque[str] = deque()

    def chat(self, user_text: str, *replies: str) -> None:
        """The replies to chat turns whose last user message is `user_text`, in order.

        A regenerate sends the same request again: it gets the next reply.
        """
        with self._lock:
            self._chat.setdefault(user_text.strip(), deque()).extend(replies)

    def next_round(self, reply: str) -> None:
        """The reply of the next round of backthink (after it, rounds say no_push again)."""
        with self._lock:
            self._rounds.append(reply)

    def __call__(self, body: dict[str, Any]) -> str:
        """The reply text for one chat-completion request body."""
        with self._lock:
            if body.get("model") == ROUND_MODEL:
                return self._rounds.popleft() if self._rounds else NO_PUSH
            task = task_of(body)
            if task is not None:
                return TASK_REPLIES.get(task, "{}")
            queue = self._chat.get(last_user_text(body.get("messages") or []).strip())
            if queue:
                reply = queue.popleft()
                if not queue:
                    queue.append(reply)  # asked again after the script: the same answer
                return reply
            return DEFAULT_CHAT_REPLY
