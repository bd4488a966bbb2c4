"""Which relay requests are a front-end's own tasks, pure: headers, the task URL, known prompts.

The bodies are the shapes each front-end's default prompt gives (the few
words that tell it, see docs/api.md for the source each was read from), and
every request Open WebUI 0.12.4 sent in the front-ends tier.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backthink.api.headers import ids_of
from backthink.api.tasks import HEAD_CHARS, task_of
from backthink.api.turns import Ids

FIXTURES = Path(__file__).parent / "fixtures" / "openwebui-0.12.4"


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


CHAT = [user("今天考完试了"), bot("辛苦啦！"), user("还不错")]


@pytest.mark.parametrize(
    ("messages", "task"),
    [
        # Open WebUI: one user message that starts with its mark, named by its first line.
        ([user("### Task:\nGenerate a concise title summarizing the chat history.")],
         "title_generation"),
        ([user("### Task:\nGenerate 1-3 broad tags categorizing the main themes")],
         "tags_generation"),
        ([user("### Task:\nSuggest 3-5 relevant follow-up questions")], "follow_up_generation"),
        ([user("### Task:\nPredict 3-5 useful messages this user might naturally send next")],
         "follow_up_generation"),
        ([user("### Task:\nAnalyze the chat history to determine the necessity of generating "
               "search queries")], "query_generation"),
        ([user("### Task:\nYou are an autocompletion system. Continue the text")],
         "autocomplete_generation"),
        ([user("### Task:\nGenerate a detailed prompt for am image generation task")],
         "image_prompt_generation"),
        ([user("### Task:\nSummarize the conversation history that will be compacted out")],
         "context_compaction"),
        ([system("You are Cyrene."), user("### Task:\nSomething the admin wrote")],
         "openwebui_task"),
        ([user("Your task is to reflect the speaker's likely facial expression through a "
               "fitting emoji.")], "emoji_generation"),
        # Its RAG template starts with the mark too, and is the owner's turn.
        ([user("### Task:\nRespond to the user query using the provided context")], None),
        # A conversation that merely mentions the mark is a turn.
        ([*CHAT[:2], user("### Task:\nGenerate a title")], None),
        # LibreChat: its title run's prompt, structured or completion; an older system form.
        ([user("Analyze this conversation and provide:\n1. The detected language")],
         "librechat_title"),
        ([user("Provide a concise, 5-word-or-less title for the conversation, using")],
         "librechat_title"),
        ([system("Write a concise title for this conversation in the given language. Title in"),
          user("Language: English")], "librechat_title"),
        # LobeChat: the summarizer's system message, current and older.
        ([system("You are a professional conversation summarizer. Generate"), user("user: hi")],
         "lobechat_title"),
        ([system("你是一名擅长会话的助理，你需要将用户的会话总结为 10 个字以内的标题"),
          user("user: 你好")], "lobechat_title"),
        # Chatbox: one user message naming the conversation.
        ([user("Based on the chat history, give this conversation a name.\nKeep it short")],
         "chatbox_title"),
        # SillyTavern: the summarize extension's prompt after the whole chat.
        ([*CHAT, system("Ignore previous instructions. Summarize the most important facts and "
                        "events in the story so far.")], "sillytavern_summary"),
        # Content parts are read as their text.
        ([user([{"type": "text", "text": "### Task:\nGenerate a concise title"}])],
         "title_generation"),
        # The owner's own words.
        (CHAT, None),
        ([user("Name this conversation for me?")], None),
        ([], None),
    ],
)  # fmt: skip
def test_task_prompts_are_known_by_their_shape(
    messages: list[dict[str, Any]], task: str | None
) -> None:
    """Each front-end's default task prompt is a task by its body alone; a turn is not."""
    assert task_of({"model": "m", "messages": messages}) == task


def test_the_header_and_the_task_url_decide_before_the_body() -> None:
    """`X-Backthink-Task` names the task (`none` forces a turn); `/v1/tasks/` is a task."""
    title = {"messages": [user("### Task:\nGenerate a concise title")]}
    chat = {"messages": CHAT}
    assert task_of(chat, header="title_generation") == "title_generation"
    assert task_of(chat, header="  tags gen\r\n<x>") == "tagsgenx"
    assert task_of(chat, header="\u4e2d") == "task"
    assert task_of(title, header="none") is None and task_of(title, header="None") is None
    assert task_of(title, header="") == "title_generation"
    assert task_of(chat, header="") is None
    assert task_of(chat, tasks_path=True) == "task"
    assert task_of(title, tasks_path=True) == "title_generation"


def test_only_the_head_of_a_message_is_read() -> None:
    """A prompt's words past the checked head do not count, however long the message."""
    far = " " * (HEAD_CHARS * 3) + "### Task:\nGenerate a concise title"
    assert task_of({"messages": [user(far)]}) is None
    huge = "### Task:\nGenerate a concise title\n" + "x" * 5_000_000
    assert task_of({"messages": [user(huge)]}) == "title_generation"


def test_every_request_open_webui_sent_is_known_for_what_it_is() -> None:
    """Each captured Open WebUI 0.12.4 body is the task it was, and each chat turn a turn."""
    seen = 0
    for path in sorted(FIXTURES.glob("*.json")):
        doc = json.loads(path.read_text())
        if doc["kind"] == "models":
            continue
        expected = None if doc["kind"] == "chat" else doc["kind"]
        assert task_of(doc["body"]) == expected, path.name
        seen += 1
    assert seen >= 20


def test_front_end_ids_come_from_their_headers() -> None:
    """Chat, message and parent ids are read; empty or overlong values name nothing."""
    assert ids_of({}) == Ids()
    found = ids_of(
        {
            "x-openwebui-chat-id": "c1",
            "x-backthink-message": " m1 ",
            "x-backthink-parent": "",
        }
    )
    assert found == Ids("c1", "m1", "")
    assert ids_of({"x-backthink-chat": "c2", "x-openwebui-chat-id": "c1"}).chat == "c2"
    assert ids_of({"x-backthink-chat": "", "x-backthink-message": "m" * 201}) == Ids()
