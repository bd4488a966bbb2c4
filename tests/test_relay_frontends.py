"""Open WebUI 0.12.4's own requests, replayed against the relay: the front-end contract.

The front-ends tier (`tests/frontends/`) captured every request Open WebUI
sent the relay in one evening (tests/fixtures/openwebui-0.12.4/); here they
are sent again, in order, to the relay over real HTTP, the fake endpoint
answering each as the tier's does. Once as Open WebUI sends them at its
defaults, once with the header line docs/api.md gives; a push is delivered
where the owner was away (between chat A and chat B).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from frontends import story
from frontends.replies import TASK_REPLIES, Replies
from support.api_rig import WAIT_S, Rig, open_rig
from support.fake_openai import FakeOpenAI, RecordedRequest

FIXTURES = Path(__file__).parent / "fixtures" / "openwebui-0.12.4"
PUSH_BEFORE = "18-b-turn-1-title_generation.json"
"""The first request after the owner went away: the push is delivered before it."""
# What Open WebUI's header templates give each chat turn (and its tasks): the chat and the
# ids of the user message and the reply it follows (Open WebUI's own ids stand in as names).
TURN_IDS = {
    "a-turn-1": ("chat-a", "u-a1", ""),
    "a-turn-2": ("chat-a", "u-a2", "r-a1"),
    "a-turn-3": ("chat-a", "u-a3", "r-a2"),
    "a-turn-4": ("chat-a", "u-a4", "r-a3"),
    "a-regenerate-4": ("chat-a", "u-a4", "r-a3"),
    "a-edit-2": ("chat-a", "u-a2e", "r-a1"),
    "a-turn-5": ("chat-a", "u-a5", "r-a2e"),
    "b-turn-1": ("chat-b", "u-b1", ""),
    "b-typing": ("chat-b", "", ""),
    "b-turn-2": ("chat-b", "u-b2", "r-b1"),
}


def fixtures() -> list[dict[str, Any]]:
    """The captured requests, in the order Open WebUI sent them."""
    return [
        {**json.loads(path.read_text()), "file": path.name}
        for path in sorted(FIXTURES.glob("*.json"))
    ]


def template_headers(doc: dict[str, Any]) -> dict[str, str]:
    """The headers Open WebUI sends a request with the documented header line configured."""
    chat, message, parent = TURN_IDS[doc["step"]]
    task = "" if doc["kind"] == "chat" else doc["kind"]
    return {
        "x-backthink-task": task,
        "x-backthink-chat": chat,
        "x-backthink-message": message,
        "x-backthink-parent": parent,
    }


class Replay:
    """What the relay forwarded for each replayed request, and the session after each step."""

    def __init__(self) -> None:
        self.forwarded: dict[str, RecordedRequest] = {}
        self.after: dict[str, list[dict[str, Any]]] = {}
        self.answers: dict[str, bytes] = {}


async def replay(rig: Rig, fake: FakeOpenAI, *, with_headers: bool) -> Replay:
    """Send every captured request, in order, as Open WebUI did; deliver the push between."""
    replies = Replies()
    for asked, *answers in [
        (story.A1, story.R1),
        (story.A2, story.R2),
        (story.A3, story.R3),
        (story.A4, story.R4, story.R4_AGAIN),
        (story.A2_EDITED, story.R2_EDITED),
        (story.A5, story.R5),
        (story.B1, story.RB1),
        (story.B2, story.RB2),
    ]:
        replies.chat(asked, *answers)
    fake.responder = replies
    done = Replay()
    async with rig.client() as client:
        for doc in fixtures():
            if doc["file"] == PUSH_BEFORE:
                await rig.push(story.PUSH)
            before = len(fake.requests)
            extra = template_headers(doc) if with_headers and doc["kind"] != "models" else {}
            if doc["method"] == "GET":
                answer = await client.get(doc["path"], headers=extra)
                done.answers[doc["file"]] = answer.content
            else:
                async with client.stream(
                    "POST", doc["path"], json=doc["body"], headers=extra
                ) as answer:
                    done.answers[doc["file"]] = b"".join(
                        [piece async for piece in answer.aiter_bytes()]
                    )
            assert answer.status_code == 200, (doc["file"], done.answers[doc["file"]])
            await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
            (done.forwarded[doc["file"]],) = fake.requests[before:]
            session = await client.get("/v1/messages", params={"all": 1, "limit": 1000})
            done.after[doc["step"]] = session.json()["messages"]
    return done


@pytest.fixture(params=[False, True], ids=["defaults", "header-line"])
async def replayed(
    request: pytest.FixtureRequest, tmp_path: Path, fake: FakeOpenAI
) -> AsyncIterator[tuple[Rig, Replay]]:
    async with open_rig(tmp_path, fake) as rig:
        yield rig, await replay(rig, fake, with_headers=request.param)


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """A forwarded request's messages as (role, text)."""
    return [(m["role"], m["content"]) for m in request.body["messages"]]


def texts(session: list[dict[str, Any]], *, superseded: bool = False) -> list[str]:
    """The texts of a session listing, current ones (or only the superseded ones)."""
    return [m["text"] for m in session if bool(m.get("superseded")) == superseded]


async def test_open_webui_tasks_pass_through_unrecorded(replayed: tuple[Rig, Replay]) -> None:
    """Titles, tags, follow-ups and autocompletions are forwarded as sent and leave nothing."""
    _, done = replayed
    session = done.after["b-turn-2"]
    assert [t for t in texts(session) if t.lstrip().startswith("### Task:")] == []
    assert [m["text"] for m in session if m["text"] in TASK_REPLIES.values()] == []
    tasks = [d for d in fixtures() if d["kind"] not in ("chat", "models")]
    assert len(tasks) == 15
    for doc in tasks:
        assert done.forwarded[doc["file"]].body == doc["body"], doc["file"]
    assert texts(session) == [
        story.A1,
        story.R1,
        story.A2_EDITED,
        story.R2_EDITED,
        story.A5,
        story.R5,
        story.PUSH,
        story.B1,
        story.RB1,
        story.B2,
        story.RB2,
    ]


async def test_a_regenerate_leaves_one_user_line_and_one_reply(
    replayed: tuple[Rig, Replay],
) -> None:
    """Right after turn 4 is regenerated, its question is there once, with the new reply."""
    _, done = replayed
    now = texts(done.after["a-regenerate-4"])
    assert now == [
        story.A1,
        story.R1,
        story.A2,
        story.R2,
        story.A3,
        story.R3,
        story.A4,
        story.R4_AGAIN,
    ]
    assert story.R4 not in texts(done.after["a-regenerate-4"], superseded=True)


async def test_an_edit_supersedes_the_turns_after_it(replayed: tuple[Rig, Replay]) -> None:
    """After turn 2 is edited, turns 2-4 are kept, marked superseded, and read by no round."""
    rig, done = replayed
    assert texts(done.after["a-edit-2"], superseded=True) == [
        story.A2,
        story.R2,
        story.A3,
        story.R3,
        story.A4,
        story.R4_AGAIN,
    ]
    app = await rig.fleet.app("o")
    view = await app.messages.session_view("o", 50)
    seen = [m.text for m in view.recent]
    assert [t for t in story.SUPERSEDED if t in seen] == [] and story.A2 not in seen
    assert story.A2_EDITED in seen
    turn_5 = done.forwarded["16-a-turn-5-chat.json"]
    assert [t for _, t in said(turn_5) if t in story.SUPERSEDED] == []


async def test_a_push_made_while_away_opens_the_new_chat_on_every_turn(
    replayed: tuple[Rig, Replay],
) -> None:
    """The push goes before chat B's first message on its first and second turn, in no task."""
    _, done = replayed
    for name in ("19-b-turn-1-chat.json", "24-b-turn-2-chat.json"):
        messages = said(done.forwarded[name])
        assert (
            messages.index(("assistant", story.PUSH)) == messages.index(("user", story.B1)) - 1
        ), name
    tasks = [f for f, r in done.forwarded.items() if "chat" not in f and "models" not in f]
    assert [
        f for f in tasks if story.PUSH in json.dumps(done.forwarded[f].body, ensure_ascii=False)
    ] == []


async def test_streamed_turns_are_metered_and_the_answer_is_what_open_webui_asked(
    replayed: tuple[Rig, Replay],
) -> None:
    """Every streamed turn records its tokens; Open WebUI, which asked none, gets no usage."""
    rig, done = replayed
    chats = [d["file"] for d in fixtures() if d["kind"] == "chat"]
    assert len(chats) == 9
    for name in chats:
        assert done.forwarded[name].body["stream_options"] == {"include_usage": True}
        assert b'"usage"' not in done.answers[name]
    async with rig.client() as client:
        usage = (await client.get("/v1/status")).json()["relay"]
    assert usage["unmetered"] == 0 and usage["prompt_tokens"] > 0
    assert usage["requests"] == len(fixtures()) - 1
