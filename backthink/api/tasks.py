"""Which relay requests are a front-end's own tasks (titles, tags, summaries): pure.

A chat front-end asks its model for more than the owner's turns: a title
for the chat, tags, follow-up suggestions, an autocompletion while the owner
types, a summary. Those requests are not the conversation: the relay
forwards them unchanged and keeps nothing of them. A request is a task when

- it carries `X-Backthink-Task` with a value other than empty or `none`
  (Open WebUI fills it from its `{{TASK}}` header template); `none` makes it
  a turn whatever its body says;
- it came in under the task base URL `/v1/tasks/`;
- its body has the shape of a known front-end's default task prompt (see
  `PROMPTS` and docs/api.md, which names the source each was read from).

Every check reads a bounded head of a message (`HEAD_CHARS`) with
`startswith` and `in`: linear in that head, whatever the body holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from backthink.api.said import content_text

TASK_HEADER = "x-backthink-task"
FORCE_TURN = "none"
"""The header value that makes a request a turn, whatever its body looks like."""
NAME_CHARS = 40  # characters of a task's name kept for the log, at most
HEAD_CHARS = 400  # characters of a message's start a body check reads, at most
PATH_TASK = "task"
"""The name of a task known only by its base URL."""

OPEN_WEBUI_MARK = "### Task:"
# Open WebUI's task templates, by a word of their first line after the mark, in the
# order they are tried. Its RAG template starts with the mark too: that is a turn.
OPEN_WEBUI_TASKS: tuple[tuple[str, str | None], ...] = (
    ("provided context", None),
    ("autocompletion", "autocomplete_generation"),
    ("compacted", "context_compaction"),
    ("search quer", "query_generation"),
    ("image", "image_prompt_generation"),
    ("tags", "tags_generation"),
    ("follow-up", "follow_up_generation"),
    ("send next", "follow_up_generation"),
    ("title", "title_generation"),
)
OPEN_WEBUI_OTHER = "openwebui_task"
OPEN_WEBUI_EMOJI = (
    "Your task is to reflect the speaker's likely facial expression",
    "emoji_generation",
)

Where = Literal["only_user", "first_system", "last"]


@dataclass(frozen=True)
class Prompt:
    """A front-end's default task prompt, known by how its message begins."""

    front_end: str
    name: str
    where: Where
    """`only_user`: the one user message of a request without other turns;
    `first_system`: the request's first message, a system one; `last`: its last message."""
    start: str
    """The first words of that message (a few, enough to tell it)."""


PROMPTS: tuple[Prompt, ...] = (
    Prompt("Open WebUI", OPEN_WEBUI_EMOJI[1], "only_user", OPEN_WEBUI_EMOJI[0]),
    Prompt("LibreChat", "librechat_title", "only_user", "Analyze this conversation and provide:"),
    Prompt("LibreChat", "librechat_title", "only_user", "Provide a concise, 5-word-or-less title"),
    Prompt(
        "LibreChat",
        "librechat_title",
        "first_system",
        "Write a concise title for this conversation in the given language.",
    ),
    Prompt(
        "LobeChat",
        "lobechat_title",
        "first_system",
        "You are a professional conversation summarizer.",
    ),
    Prompt(
        "LobeChat",
        "lobechat_title",
        "first_system",
        "你是一名擅长会话的助理，你需要将用户的会话总结为",
    ),
    Prompt(
        "Chatbox",
        "chatbox_title",
        "only_user",
        "Based on the chat history, give this conversation a name.",
    ),
    Prompt(
        "SillyTavern",
        "sillytavern_summary",
        "last",
        "Ignore previous instructions. Summarize the most important facts and events",
    ),
)


def task_of(
    body: Mapping[str, Any], *, header: str | None = None, tasks_path: bool = False
) -> str | None:
    """The task a relay request is, by its header, its base URL or its body; None for a turn.

    Args:
        body: the request's JSON object.
        header: the value of `X-Backthink-Task`, None when the request has none.
        tasks_path: whether it came in under `/v1/tasks/`.
    """
    if header is not None:
        value = header.strip()
        if value.lower() == FORCE_TURN:
            return None
        if value:
            return _name(value)
    found = shape_of(body.get("messages"))
    if found is not None:
        return found
    return PATH_TASK if tasks_path else None


def shape_of(messages: Any) -> str | None:
    """The task a request's messages have the shape of, or None."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        return None
    heads = [_head(m) for m in messages]
    speaking = [h for h in heads if h is not None and h[0] != "system"]
    only_user = speaking[0][1] if len(speaking) == 1 and speaking[0][0] == "user" else None
    if only_user is not None and only_user.startswith(OPEN_WEBUI_MARK):
        return _open_webui(only_user[len(OPEN_WEBUI_MARK) :])
    first, last = heads[0], heads[-1]
    for prompt in PROMPTS:
        if prompt.where == "only_user":
            text = only_user
        elif prompt.where == "first_system":
            text = first[1] if first is not None and first[0] == "system" else None
        else:
            text = last[1] if last is not None else None
        if text is not None and text.startswith(prompt.start):
            return prompt.name
    return None


def _open_webui(rest: str) -> str | None:
    """The Open WebUI task whose template goes on with `rest`; None for its RAG one (a turn)."""
    line = rest.lstrip().partition("\n")[0].lower()
    for word, name in OPEN_WEBUI_TASKS:
        if word in line:
            return name
    return OPEN_WEBUI_OTHER


def _head(message: Any) -> tuple[str, str] | None:
    """A message's role and the start of its text, outer whitespace left out; None if not one."""
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        return None
    content = message.get("content")
    if isinstance(content, str):
        text = content[: HEAD_CHARS * 2]
    elif isinstance(content, list):
        # Parts: only the first few can start the text.
        text = content_text(content[:4])[0][: HEAD_CHARS * 2]
    else:
        return None
    return message["role"], text.lstrip()[:HEAD_CHARS]


def _name(value: str) -> str:
    """A header's task name as the log may show it: ASCII letters, digits, `_-.`, bounded."""
    kept = "".join(c for c in value[:NAME_CHARS] if c.isascii() and (c.isalnum() or c in "_-."))
    return kept or PATH_TASK
