"""The relay's doors for front-ends, over real HTTP: tasks, chats, embeddings, errors, browsers.

The doors run in the test's loop (see `api_rig`), the fake endpoint upstream.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Workdir
from support.api_rig import WAIT_S, Rig, open_rig
from support.fake_openai import FakeOpenAI

TITLE = "### Task:\nGenerate a concise title summarizing the chat history."
BROWSER = "http://localhost:3000"


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake, api={"cors_origins": [BROWSER]}) as opened:
        yield opened


def body(*messages: tuple[str, str]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": r, "content": t} for r, t in messages]}


async def session(rig: Rig, **params: Any) -> list[dict[str, Any]]:
    async with rig.client() as c:
        found: list[dict[str, Any]] = (await c.get("/v1/messages", params=params)).json()[
            "messages"
        ]
    return found


async def test_tasks_by_header_url_or_shape_are_forwarded_and_kept_nowhere(
    rig: Rig, fake: FakeOpenAI
) -> None:
    """A task is passed on as sent, never shown a push, and stores nothing; `none` is a turn."""
    await rig.push("Did you eat?")
    async with rig.client() as c:
        shaped = body(("user", TITLE))
        for path, headers, sent in [
            ("/v1/chat/completions", {}, shaped),
            ("/v1/chat/completions", {"x-backthink-task": "summary"}, body(("user", "hi"))),
            ("/v1/tasks/chat/completions", {}, body(("user", "name this chat"))),
        ]:
            answer = await c.post(path, json=sent, headers=headers)
            assert answer.status_code == 200
            assert fake.chat_requests[-1].body == sent
        models = await c.get("/v1/tasks/models")
        assert [m["id"] for m in models.json()["data"]] == ["fake-model"]
        await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
        assert [m["text"] for m in await session(rig)] == ["Did you eat?"]
        forced = await c.post(
            "/v1/chat/completions", json=shaped, headers={"x-backthink-task": "none"}
        )
        assert forced.status_code == 200
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    assert [m["text"] for m in await session(rig)][:2] == ["Did you eat?", TITLE]
    assert fake.chat_requests[-1].body["messages"][0]["content"] == "Did you eat?"


async def test_two_chats_side_by_side_keep_their_own_turns(rig: Rig, fake: FakeOpenAI) -> None:
    """Turns of two chats interleave in the session; an edit in one leaves the other alone."""
    fake.script("a reply", "b reply", "a again", "b again", "a edited")
    async with rig.client() as c:

        async def say(chat: str, *messages: tuple[str, str]) -> None:
            answer = await c.post(
                "/v1/chat/completions", json=body(*messages), headers={"x-backthink-chat": chat}
            )
            assert answer.status_code == 200
            await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)

        await say("A", ("user", "a1"))
        await say("B", ("user", "b1"))
        await say("A", ("user", "a1"), ("assistant", "a reply"), ("user", "a2"))
        await say("B", ("user", "b1"), ("assistant", "b reply"), ("user", "b2"))
        await say("A", ("user", "a1"), ("assistant", "a reply"), ("user", "a2 edited"))
    listed = await session(rig, all=1)
    assert [(m["text"], m.get("superseded", False)) for m in listed] == [
        ("a1", False), ("a reply", False), ("b1", False), ("b reply", False),
        ("a2", True), ("a again", True), ("b2", False), ("b again", False),
        ("a2 edited", False), ("a edited", False),
    ]  # fmt: skip
    assert "superseded" not in json.dumps(await session(rig))


async def test_embeddings_are_forwarded_and_kept_nowhere(rig: Rig, fake: FakeOpenAI) -> None:
    """POST /v1/embeddings reaches the upstream as sent; its answer comes back whole."""
    sent = {"model": "embed", "input": ["今天考完试了", "明天组会"]}
    async with rig.client() as c:
        answer = await c.post("/v1/embeddings", json=sent)
    assert answer.status_code == 200 and len(answer.json()["data"]) == 2
    assert fake.requests[-1].path == "/v1/embeddings" and fake.requests[-1].body == sent
    assert await session(rig) == []


async def test_every_v1_answer_is_openai_shaped(rig: Rig) -> None:
    """Unknown paths and methods under /v1/ answer an OpenAI-style error object."""
    async with rig.client() as c:
        for method, path in [
            ("GET", "/v1/completions"),
            ("POST", "/v1/audio/speech"),
            ("GET", "/v1/chat/completions"),
            ("OPTIONS", "/v1/models"),
        ]:
            answer = await c.request(method, path)
            error = answer.json()["error"]
            assert answer.status_code == 404 and set(error) == {"message", "type", "code"}


async def test_browser_front_ends_of_listed_origins_may_call(rig: Rig) -> None:
    """A listed origin's preflight is answered and its answers name it; another's is refused."""
    preflight = {
        "origin": BROWSER,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    async with rig.client(None) as c:
        answer = await c.options("/v1/chat/completions", headers=preflight)
        assert answer.status_code == 204
        assert answer.headers["access-control-allow-origin"] == BROWSER
        assert answer.headers["access-control-allow-headers"] == "authorization, content-type"
        other = await c.options(
            "/v1/chat/completions", headers={**preflight, "origin": "http://evil.test"}
        )
        assert other.status_code == 403 and other.json()["error"]["code"] == 403
        assert "access-control-allow-origin" not in other.headers
    async with rig.client(origin=BROWSER) as c:
        models = await c.get("/v1/models")
        assert models.status_code == 200
        assert models.headers["access-control-allow-origin"] == BROWSER


def test_messages_list_all_shows_superseded_turns(workdir: Workdir) -> None:
    """`messages list --all` lists what an edit left behind, marked; the plain list does not."""
    for text in ("kept", "left behind"):
        workdir.cli("messages", "add", "--role", "user", "--text", text)
    with sqlite3.connect(workdir.path / "bt.db") as db:
        db.execute("UPDATE message SET superseded = 1 WHERE text = 'left behind'")
    assert [m["text"] for m in json.loads(workdir.cli("messages", "list", "--json").stdout)[
        "messages"]] == ["kept"]  # fmt: skip
    listed = json.loads(workdir.cli("messages", "list", "--all", "--json").stdout)["messages"]
    assert [(m["text"], m.get("superseded")) for m in listed] == [
        ("kept", None),
        ("left behind", True),
    ]
    assert (
        workdir.cli("messages", "list", "--all")
        .stdout.splitlines()[1]
        .endswith("[session, superseded]  left behind")
    )
