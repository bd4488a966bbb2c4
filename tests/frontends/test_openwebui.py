"""Open WebUI 0.12.4 at its defaults in front of the relay: what the owner and the companion see.

One story (see `story.py`) is played once against real processes; each test
reads one property of what it left: the plumbing first, then the front-end
contract of DESIGN §16.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.fake_openai import RecordedRequest

from .capture import Scrub, differences, fixtures, write
from .openwebui import VERSION
from .replies import TASK_REPLIES, task_of
from .stack import PUSH_CHANNEL
from .story import (
    A1,
    A2,
    A2_EDITED,
    A4,
    A5,
    B1,
    B2,
    PUSH,
    R1,
    R2_EDITED,
    R4,
    R4_AGAIN,
    R5,
    RB1,
    RB2,
    SUPERSEDED,
    Story,
)

pytestmark = [pytest.mark.frontends, pytest.mark.timeout(1800)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """A forwarded request's messages as (role, text) pairs."""
    out = []
    for message in request.body.get("messages") or []:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        out.append((str(message.get("role")), text))
    return out


def branch(chat: dict[str, Any]) -> list[tuple[str, str]]:
    """The messages of an Open WebUI chat's branch on screen, first to last, as (role, text)."""
    messages = chat["chat"]["history"]["messages"]
    out: list[tuple[str, str]] = []
    current = chat["chat"]["history"]["currentId"]
    while current is not None:
        message = messages[current]
        out.append((message["role"], message["content"]))
        current = message["parentId"]
    return out[::-1]


def the_one_chat_turn(story: Story, step: str) -> RecordedRequest:
    """The single chat-turn request a step sent upstream."""
    turns = story.steps[step].chat_turns()
    assert len(turns) == 1, [said(t) for t in turns]
    return turns[0]


# -- the plumbing: Open WebUI, the relay and the companion work together today ----------


def test_open_webui_holds_the_owners_evening(story: Story) -> None:
    """Open WebUI stored every reply the upstream gave, on the branch the owner sees."""
    a, b = story.chats["a"], story.chats["b"]
    assert branch(a) == [
        ("user", A1),
        ("assistant", R1),
        ("user", A2_EDITED),
        ("assistant", R2_EDITED),
        ("user", A5),
        ("assistant", R5),
    ]
    assert branch(b) == [("user", B1), ("assistant", RB1), ("user", B2), ("assistant", RB2)]
    # Its background tasks ran through the relay and their answers were used.
    assert a["title"] == "考试之后" and a["meta"]["tags"]
    messages = list(a["chat"]["history"]["messages"].values())
    (a4,) = [m["id"] for m in messages if m["role"] == "user" and m["content"] == A4]
    replies_to_a4 = [m["content"] for m in messages if m.get("parentId") == a4]
    assert replies_to_a4 == [R4, R4_AGAIN]  # the regenerate kept both, as Open WebUI does
    assert all(m.get("followUps") for m in messages if m["role"] == "assistant")


def test_every_call_goes_through_the_relay_with_the_owners_token(story: Story) -> None:
    """Each of Open WebUI's calls reached the relay with the token and then the upstream."""
    tapped = [r for s in story.steps.values() for r in s.tapped]
    posts = [r for r in tapped if r.method == "POST" and r.path == "/v1/chat/completions"]
    assert posts and all(r.headers.get("authorization", "").startswith("Bearer ") for r in posts)
    relayed = [
        r
        for s in story.steps.values()
        for r in s.upstream
        if r.headers.get("authorization") == "Bearer sk-upstream-key"
        and r.path == "/v1/chat/completions"
    ]
    assert len(relayed) == len(posts)
    # The defaults ran: a title and tags for each new chat, follow-ups for every turn.
    kinds = [task_of(r.body) or "chat" for r in posts]
    assert kinds.count("title_generation") == 2 and kinds.count("tags_generation") == 2
    assert kinds.count("follow_up_generation") == kinds.count("chat") == 9
    assert kinds.count("autocomplete_generation") == 2
    # Chat turns stream, and Open WebUI does not ask for usage.
    turns = [r for r in posts if task_of(r.body) is None]
    assert all(r.body["stream"] is True and "stream_options" not in r.body for r in turns)


def test_a_push_is_seen_inside_open_webui(story: Story) -> None:
    """A push the companion delivers lands in the Open WebUI Channel as a message."""
    round_ = story.steps["round-push"].round
    assert round_ is not None
    assert (round_["outcome"], round_["reason"]) == ("delivered", PUSH_CHANNEL)
    assert [m["content"] for m in story.channel] == [PUSH]


def test_superseded_turns_never_reach_a_later_chat_request(story: Story) -> None:
    """The turn after an edit carries the new branch only, not the turns it replaced."""
    texts = [text for _, text in said(the_one_chat_turn(story, "a-turn-5"))]
    assert [t for t in texts if t in SUPERSEDED] == []
    assert A2_EDITED in texts and A2 not in texts


def test_the_fixtures_are_what_open_webui_sends(story: Story, scrub: Scrub, rewrite: bool) -> None:
    """The committed fixtures hold exactly the requests Open WebUI sent the relay in this run."""
    found = fixtures(story, scrub)
    assert found and all(doc["openwebui"] == VERSION for doc in found.values())
    if rewrite:
        write(found)
    assert differences(found) == [], "run with --rewrite-fixtures after checking the change"


# -- the contract of DESIGN §16 ---------------------------------------------------------


def test_no_task_enters_the_session(story: Story) -> None:
    """After the evening, the session holds no task prompt and no task reply."""
    texts = [m["text"] for m in story.session]
    assert [t for t in texts if t.lstrip().startswith("### Task:")] == []
    assert [t for t in texts if t in TASK_REPLIES.values()] == []


def test_a_regenerate_leaves_one_user_line_and_one_reply(story: Story) -> None:
    """Right after turn 4 is regenerated, the session holds its question once and the new reply."""
    session = story.steps["a-regenerate-4"].session
    assert [m["text"] for m in session if m["role"] == "user" and m["text"] == A4] == [A4]
    replies = [
        m["text"] for m in session if m["role"] == "assistant" and m["text"] in (R4, R4_AGAIN)
    ]
    assert replies == [R4_AGAIN]


def test_superseded_turns_are_kept_and_marked(story: Story) -> None:
    """After the edit of turn 2, turns 3-4 are listed with all=1 as superseded, and only there."""
    kept = [m for m in story.session if m["text"] in SUPERSEDED]
    # R4 may be gone: the regenerate before the edit replaced it.
    assert {m["text"] for m in kept} >= set(SUPERSEDED) - {R4}
    assert [m["text"] for m in kept if m.get("superseded") is not True] == []
    assert [m for m in story.session_current if m["text"] in SUPERSEDED] == []


def test_superseded_turns_never_reach_a_round(story: Story) -> None:
    """The round after the edit is not shown turns 3-4."""
    rounds = story.steps["round-after-edit"].rounds()
    assert len(rounds) == 1, rounds
    texts = " ".join(text for _, text in said(rounds[0]))
    assert [t for t in SUPERSEDED if t in texts] == []
    assert A2_EDITED in texts


def test_a_push_made_while_away_opens_the_new_chat(story: Story) -> None:
    """The first turn of the chat begun after a push shows the push before the owner's words."""
    messages = said(the_one_chat_turn(story, "b-turn-1"))
    assert ("assistant", PUSH) in messages, messages
    assert messages.index(("assistant", PUSH)) < messages.index(("user", B1))


def test_the_push_stays_on_the_second_turn_of_that_chat(story: Story) -> None:
    """The second turn of that chat still shows the push, before the chat's first message."""
    messages = said(the_one_chat_turn(story, "b-turn-2"))
    assert ("assistant", PUSH) in messages, messages
    assert messages.index(("assistant", PUSH)) < messages.index(("user", B1))


def test_a_push_never_goes_into_a_task(story: Story) -> None:
    """No Open WebUI task request reaching the upstream carries the push."""
    tasks = [r for s in story.steps.values() for r in s.tasks()]
    assert tasks and [r for r in tasks if PUSH in json.dumps(r.body, ensure_ascii=False)] == []


def test_streamed_turns_are_metered(story: Story) -> None:
    """Every streamed relay turn records its token usage; none is counted unmetered."""
    streamed = [e for e in story.relayed if e.get("stream") is True and e.get("status") == 200]
    assert streamed and all(isinstance(e.get("prompt_tokens"), int) for e in streamed)
    assert story.status["relay"]["unmetered"] == 0
