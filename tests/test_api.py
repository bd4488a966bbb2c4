"""The API and the relay over real HTTP on 127.0.0.1, a real SQLite file and the fake endpoint.

The doors run in the test's own event loop, as they run in the daemon's, over
a fleet opened from settings with a FakeClock, so presence windows and message
times never depend on the wall clock. The openai SDK is the relay's client.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from conftest import ROOT
from fake_openai import FakeOpenAI

from backthink.api import ApiDoors, open_api
from backthink.api.openapi import document
from backthink.config import Settings
from backthink.delivery.audience import Audience
from backthink.delivery.dispatcher import Handoff
from backthink.host.fleet import Fleet, open_fleet
from backthink.host.live import LiveStatus
from backthink.models import Decision
from backthink.testing import FakeClock
from backthink.web import page_app

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
WAIT_S = 10.0  # seconds any awaited answer may take on a loaded machine


def api_settings(tmp_path: Path, fake: FakeOpenAI, **api: object) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "owners": {"p": {"timezone": "Europe/Berlin"}},
            "persona": {"id": "cyrene"},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"},
            "model": {
                "base_url": fake.base_url,
                "api_key": "sk-upstream-key",
                "max_retries": 0,
                "timeout_s": 5,
            },
            "prompt": {"dir": str(ROOT / "backthink/prompts")},
            "state": {"file": None},
            "gate": {"quiet_hours": ""},
            "api": {"listen": "127.0.0.1:0", **api},
            "channels": {"web": {"type": "web"}},
        }
    )


@dataclass
class Rig:
    fleet: Fleet
    doors: ApiDoors
    clock: FakeClock
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.doors.url.rstrip("/")

    def client(self, owner: str | None = "o", **headers: str) -> httpx2.AsyncClient:
        auth = {"authorization": f"Bearer {self.tokens[owner]}"} if owner else {}
        return httpx2.AsyncClient(base_url=self.url, headers={**auth, **headers}, timeout=WAIT_S)

    def sdk(self, owner: str = "o") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=self.tokens[owner], max_retries=0, timeout=WAIT_S
        )

    async def push(self, text: str, *, owner: str = "o", channel: str = "web") -> None:
        """A delivered push, through the owner's own dispatcher (outbox, write-back, stream)."""
        app = await self.fleet.app(owner)
        await app.dispatcher.hand_over(
            Handoff(
                round_id=uuid.uuid4().hex,
                owner_id=owner,
                trigger="heartbeat",
                decision=Decision(push=True, body=text),
                channel=channel,
                at=self.clock.now(),
            )
        )


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    settings = api_settings(tmp_path, fake)
    clock = FakeClock(NOW)
    audience = Audience(settings.api.seen_window)
    async with open_fleet(settings, clock=clock, audience=audience) as fleet:
        tokens = {o: await fleet.stores.tokens.issue(o, at=NOW) for o in ("o", "p")}
        doors = await open_api(fleet, ["o", "p"], lambda _: LiveStatus(), keepalive_s=0.2)
        try:
            yield Rig(fleet, doors, clock, tokens)
        finally:
            await doors.stop()


async def texts(client: httpx2.AsyncClient, **params: object) -> list[str]:
    answer = await client.get("/v1/messages", params=params)
    assert answer.status_code == 200, answer.text
    return [m["text"] for m in answer.json()["messages"]]


async def test_messages_are_stored_once_by_client_id_and_read_oldest_first(rig: Rig) -> None:
    """POST one or a list; a repeated client id answers the stored message; GET pages in order."""
    async with rig.client() as c:
        one = (await c.post("/v1/messages", json={"role": "user", "text": "hi", "id": "a1"})).json()
        again = await c.post(
            "/v1/messages",
            json=[
                {"role": "user", "text": "hi (sent twice)", "id": "a1"},
                {"role": "assistant", "text": "hello", "speaker": "cyrene", "id": 7},
                {"role": "user", "text": "no id", "at": "2026-11-30T09:59:00"},
            ],
        )
        assert again.status_code == 200
        stored = again.json()["messages"]
        assert stored[0] == one["messages"][0]
        assert [m["client_id"] for m in stored] == ["a1", "7", None]
        # A time without an offset is the owner's local time (Shanghai).
        assert stored[2]["at"] == "2026-11-30T01:59:00+00:00"
        assert await texts(c) == ["no id", "hi", "hello"]
        first = stored[2]["id"]
        assert await texts(c, after=first) == ["hi", "hello"]
        assert await texts(c, after=first, limit=1) == ["hi"]
        assert await texts(c, limit=1) == ["hello"]


async def test_every_refusal_is_json_naming_what_was_wrong(rig: Rig) -> None:
    """Bad token, another owner's id, oversized body, future date, malformed JSON: each refused."""
    async with rig.client("p") as p:
        theirs = (await p.post("/v1/messages", json={"role": "user", "text": "p's"})).json()
    async with rig.client(None) as anonymous, rig.client() as c:
        assert (await anonymous.get("/v1/messages")).status_code == 401
        bad = await anonymous.get("/v1/messages", headers={"authorization": "Bearer bt_wrong"})
        assert (bad.status_code, bad.json()) == (401, {"error": "unknown token"})
        other = await c.get("/v1/messages", params={"after": theirs["messages"][0]["id"]})
        assert other.status_code == 404 and "after" in other.json()["error"]
        big = await c.post("/v1/messages", content=b"x" * (1_048_576 + 1))
        assert big.status_code == 413 and "api.max_body_bytes" in big.json()["error"]
        future = await c.post(
            "/v1/messages", json={"role": "user", "text": "x", "at": "2027-01-01T00:00:00Z"}
        )
        assert future.status_code == 400
        assert future.json()["error"].startswith("body.at: ") and "future" in future.json()["error"]
        malformed = await c.post("/v1/messages", content=b'{"role": "user", "text": ')
        assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]
        role = await c.post("/v1/messages", json=[{"role": "robot", "text": "x"}])
        assert role.json() == {"error": "body[0].role: must be one of user, assistant, system"}
        unknown = await c.post("/v1/messages", json={"role": "user", "text": "x", "mood": "ok"})
        assert unknown.json() == {"error": "body.mood: unknown key"}
        assert (await c.get("/v1/messages", params={"limit": "many"})).status_code == 400
        assert (await c.get("/v1/nothing")).status_code == 404
        assert await texts(c) == []
    async with openai.AsyncOpenAI(
        base_url=f"{rig.url}/v1", api_key="bt_wrong", max_retries=0
    ) as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            await stranger.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert refused.value.status_code == 401


async def test_two_owners_and_two_clients_never_see_each_others_messages(rig: Rig) -> None:
    """Concurrent writers of two owners: each owner's session and stream hold only its own."""
    async with rig.client() as a, rig.client() as b, rig.client("p") as p:
        writes = [
            c.post("/v1/messages", json={"role": "user", "text": f"{name}{i}", "id": f"{name}{i}"})
            for i in range(10)
            for name, c in (("a", a), ("b", b), ("p", p))
        ]
        assert all(r.status_code == 200 for r in await asyncio.gather(*writes))
        mine, theirs = await texts(a, limit=100), await texts(p, limit=100)
        assert sorted(mine) == sorted(f"{n}{i}" for n in "ab" for i in range(10))
        assert sorted(theirs) == sorted(f"p{i}" for i in range(10))
        assert await texts(b, limit=100) == mine
        async with (
            a.stream("GET", "/v1/events") as stream_o,
            p.stream("GET", "/v1/events") as stream_p,
        ):
            lines_o, lines_p = stream_o.aiter_lines(), stream_p.aiter_lines()
            await rig.push("for o")
            await rig.push("for p", owner="p")
            assert (await _next_push(lines_o))["text"] == "for o"
            assert (await _next_push(lines_p))["text"] == "for p"


async def _next_push(lines: AsyncIterator[str]) -> dict[str, Any]:
    """The data of the next `event: push` on a raw stream, skipping comments and keep-alives."""
    async with asyncio.timeout(WAIT_S):
        event = None
        async for line in lines:
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "push":
                data: dict[str, Any] = json.loads(line.partition(":")[2])
                return data
    raise AssertionError("the stream ended")


async def test_events_resume_after_last_event_id_and_keep_alive(rig: Rig) -> None:
    """A client that reconnects with Last-Event-ID gets every push it missed, in order."""
    async with rig.client() as c:
        await c.post("/v1/messages", json={"role": "user", "text": "before the stream"})
        async with c.sse("/v1/events") as source:
            events = aiter(source)
            await rig.push("first")
            async with asyncio.timeout(WAIT_S):
                first = await anext(events)
            assert (first.event, first.json()["text"]) == ("push", "first")
            assert first.json()["delivery"] == "delivered" and first.json()["origin"] == "proactive"
        # Missed while away: two pushes and a message of the owner's.
        await rig.push("second")
        await c.post("/v1/messages", json={"role": "user", "text": "meanwhile"})
        await rig.push("third", channel="web")
        async with c.sse("/v1/events", headers={"last-event-id": first.id}) as source:
            events = aiter(source)
            async with asyncio.timeout(WAIT_S):
                got = [(await anext(events)).json()["text"] for _ in range(2)]
        assert got == ["second", "third"]
        async with c.stream("GET", "/v1/events") as raw:
            lines = raw.aiter_lines()
            async with asyncio.timeout(WAIT_S):
                seen = [await anext(lines) for _ in range(5)]
        assert ": keep-alive" in seen


async def test_session_channel_is_connected_only_while_a_client_watches(rig: Rig) -> None:
    """No client: web is not connected; an open stream or a recent read connects it."""
    app = await rig.fleet.app("o")
    assert app.dispatcher.connected() == []
    async with rig.client() as c:
        async with c.stream("GET", "/v1/events") as stream:
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT_S):
                await anext(lines)  # the stream is open once its first line arrives
            assert app.dispatcher.connected() == ["web"]
            assert (await rig.fleet.app("p")).dispatcher.connected() == []
        async with asyncio.timeout(WAIT_S):
            while app.dispatcher.connected():  # noqa: ASYNC110 - the server notices the close
                await asyncio.sleep(0.02)
        await c.get("/v1/messages")
        assert app.dispatcher.connected() == ["web"]
        rig.clock.advance(timedelta(minutes=10))
        assert app.dispatcher.connected() == []


async def test_relay_keeps_the_conversation_and_shows_pushes(rig: Rig, fake: FakeOpenAI) -> None:
    """Through the SDK, streamed and not: new turns stored once, pushes shown before the newest."""
    async with rig.sdk() as sdk:
        await _relayed_conversation(rig, fake, sdk)
    async with rig.client() as c:
        session = (await c.get("/v1/messages")).json()["messages"]
    assert [(m["role"], m["text"], m["origin"]) for m in session] == [
        ("user", "hi", "chat"),
        ("assistant", "Hello there!", "chat"),
        ("assistant", "Did you eat?", "proactive"),
        ("user", "I had an exam", "chat"),
        ("assistant", "How was the exam?", "chat"),
        ("assistant", "Good luck tomorrow.", "chat"),
        ("user", "still there?", "chat"),
        ("assistant", "[decision:no_push]", "chat"),
    ]
    assert all(m["channel"] is None for m in session if m["origin"] == "chat")
    assert session[1]["speaker"] == "cyrene"
    async with rig.client() as c:
        status = (await c.get("/v1/status")).json()
    assert status["relay"]["requests"] == 5 and status["relay"]["completion_tokens"] > 0


async def _relayed_conversation(rig: Rig, fake: FakeOpenAI, sdk: openai.AsyncOpenAI) -> None:
    """Turns through the relay: a push between, a stream, a regenerate, a failure and a retry."""
    history: list[Any] = [{"role": "system", "content": "You are Cyrene."}]

    async def say(text: str, *, stream: bool) -> str:
        history.append({"role": "user", "content": text})
        if stream:
            chunks = await sdk.chat.completions.create(
                model="front-end-model", messages=history, stream=True
            )
            reply = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        else:
            answer = await sdk.chat.completions.create(model="front-end-model", messages=history)
            reply = answer.choices[0].message.content or ""
        history.append({"role": "assistant", "content": reply})
        return reply

    fake.script("Hello there!", "How was the exam?", "Good luck tomorrow.")
    assert await say("hi", stream=False) == "Hello there!"
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    await rig.push("Did you eat?")
    assert await say("I had an exam", stream=True) == "How was the exam?"
    forwarded = fake.chat_requests[-1].body
    assert forwarded["model"] == "front-end-model"
    assert forwarded["messages"] == [
        *history[:3],
        {"role": "assistant", "content": "Did you eat?"},
        history[3],
    ]
    assert fake.chat_requests[-1].headers["authorization"] == "Bearer sk-upstream-key"
    # Regenerated: the same request again stores nothing twice.
    regenerate = history[:4]
    await sdk.chat.completions.create(model="m", messages=regenerate)
    # A failed upstream call keeps the user message, no reply; its retry adds none twice.
    fake.fail_next(1, 500)
    with pytest.raises(openai.InternalServerError):
        await sdk.chat.completions.create(
            model="m", messages=[*history, {"role": "user", "content": "still there?"}]
        )
    await say("still there?", stream=False)
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)


async def test_relay_passes_upstream_errors_through(rig: Rig, fake: FakeOpenAI) -> None:
    """The upstream's status and error body reach the client; its models list too."""
    fake.fail_next(1, 429)
    async with rig.client() as c:
        answer = await c.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert answer.status_code == 429
        assert answer.json()["error"]["message"] == "scripted failure"
        assert "retry-after" in answer.headers
        models = await c.get("/v1/models")
        assert [m["id"] for m in models.json()["data"]] == ["fake-model"]
        broken = await c.post("/v1/chat/completions", content=b"{}")
        assert broken.status_code == 400
        assert broken.json()["error"]["type"] == "invalid_request_error"


async def test_openapi_document_names_every_route(rig: Rig) -> None:
    """The served document is the package's, and lists exactly the routes the API serves."""
    served = {
        (route.path, method.lower())
        for route in rig.doors.api.routes()
        for method in getattr(route, "methods", None) or ()
        if "{" not in route.path and method != "HEAD"
    }
    doc = document()
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert served == documented
    async with rig.client(None) as c:
        assert (await c.get("/v1/openapi.json")).json() == json.loads(json.dumps(doc))


async def test_page_and_api_share_one_listener(tmp_path: Path, fake: FakeOpenAI) -> None:
    """With the same address, one listener serves the page and the API."""
    settings = api_settings(tmp_path, fake)
    async with open_fleet(settings, clock=FakeClock(NOW)) as fleet:
        doors = await open_api(fleet, ["o"], lambda _: LiveStatus(), page=page_app)
        try:
            async with httpx2.AsyncClient(base_url=doors.url, timeout=WAIT_S) as c:
                page = await c.get("/")
                assert page.status_code == 200 and "text/html" in page.headers["content-type"]
                # No owner has a token yet: on loopback the API is open for the first owner.
                assert (await c.get("/v1/status")).json()["running"] is True
                foreign = await c.get("/v1/status", headers={"host": "evil.example"})
                assert foreign.status_code == 403
        finally:
            await doors.stop()


async def test_an_owner_past_the_rate_limit_gets_429_until_time_passes(rig: Rig) -> None:
    """A burst beyond the limit is refused with Retry-After; the other owner is not held up."""
    from backthink.api.access import BURST, RATE_PER_S

    async with rig.client() as c, rig.client("p") as p:
        for _ in range(BURST):
            assert (await c.get("/v1/messages", params={"limit": 0})).status_code == 200
        over = await c.get("/v1/messages")
        assert over.status_code == 429 and over.headers["retry-after"] == "1"
        assert "too many requests" in over.json()["error"]
        assert (await p.get("/v1/messages")).status_code == 200
        rig.clock.advance(timedelta(seconds=1 / RATE_PER_S))
        assert (await c.get("/v1/messages")).status_code == 200
