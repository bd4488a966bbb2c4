"""The session API over real HTTP on 127.0.0.1, a real SQLite file and the fake endpoint.

The doors run in the test's own event loop (see `api_rig`), with a FakeClock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx2
import openai
import pytest
from support.api_rig import NOW, WAIT_S, Rig, api_settings, open_rig, texts
from support.fake_openai import FakeOpenAI

from backthink.api import open_api
from backthink.api.openapi import document
from backthink.host.app import AppOverrides
from backthink.host.fleet import open_fleet
from backthink.host.live import LiveStatus
from backthink.models import Message
from backthink.testing import FakeClock
from backthink.web import page_app


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake) as opened:
        yield opened


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
    json_type = {"content-type": "application/json"}
    async with rig.client(None) as anonymous, rig.client() as c:
        assert (await anonymous.get("/v1/messages")).status_code == 401
        bad = await anonymous.get("/v1/messages", headers={"authorization": "Bearer bt_wrong"})
        assert (bad.status_code, bad.json()) == (401, {"error": "unknown token"})
        other = await c.get("/v1/messages", params={"after": theirs["messages"][0]["id"]})
        assert other.status_code == 404 and "after" in other.json()["error"]
        big = await c.post("/v1/messages", content=b"x" * (1_048_576 + 1), headers=json_type)
        assert big.status_code == 413 and "api.max_body_bytes" in big.json()["error"]
        future = await c.post(
            "/v1/messages", json={"role": "user", "text": "x", "at": "2027-01-01T00:00:00Z"}
        )
        assert future.status_code == 400
        assert future.json()["error"].startswith("body.at: ") and "future" in future.json()["error"]
        malformed = await c.post(
            "/v1/messages", content=b'{"role": "user", "text": ', headers=json_type
        )
        assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]
        role = await c.post("/v1/messages", json=[{"role": "robot", "text": "x"}])
        assert role.json() == {"error": "body[0].role: must be one of user, assistant"}
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


async def test_numbers_and_nesting_the_parsers_refuse_are_400_not_500(rig: Rig) -> None:
    """Non-ASCII digits in after, limit or Last-Event-ID, and JSON nested past any depth: 400."""
    deep = b"[" * 100_000
    async with rig.client() as c:
        for params in ({"after": "²"}, {"limit": "²"}, {"limit": "٣"}, {"after": "9" * 40}):
            answer = await c.get("/v1/messages", params=params)
            assert answer.status_code == 400, (params, answer.text)
            assert answer.json()["error"].startswith(next(iter(params)))
        resumed = await c.get("/v1/events", headers={"last-event-id": b"\xb2"})  # ² in Latin-1
        assert resumed.status_code == 400 and "last-event-id" in resumed.json()["error"]
        for path in ("/v1/messages", "/v1/chat/completions"):
            nested = await c.post(path, content=deep, headers={"content-type": "application/json"})
            assert nested.status_code == 400, (path, nested.text)
        assert await texts(c) == []


async def test_only_user_and_assistant_messages_come_in_dated_no_later_than_now(rig: Rig) -> None:
    """A system message is refused naming role; a time a little ahead is stored as now."""
    async with rig.client() as c:
        system = await c.post("/v1/messages", json={"role": "system", "text": "obey"})
        assert system.status_code == 400
        assert system.json() == {"error": "body.role: must be one of user, assistant"}
        ahead = NOW + timedelta(minutes=4)
        stored = await c.post(
            "/v1/messages", json={"role": "user", "text": "soon", "at": ahead.isoformat()}
        )
        assert stored.status_code == 200
        assert stored.json()["messages"][0]["at"] == NOW.isoformat()
        assert await texts(c) == ["soon"]


async def test_a_page_stops_early_rather_than_load_every_large_message(rig: Rig) -> None:
    """Five messages of 3 million characters: a page holds the newest that fit; after= pages on."""
    from backthink.api.pages import PAGE_MAX_CHARS

    size = 3_000_000
    assert 2 * size <= PAGE_MAX_CHARS < 3 * size
    big = [
        Message(
            owner_id="o", role="user", text=f"{i}" * size, created_at=NOW - timedelta(hours=5 - i)
        )
        for i in range(5)
    ]
    await rig.fleet.session.append(big)
    async with rig.client() as c:
        page = (await c.get("/v1/messages", params={"limit": 1000})).json()["messages"]
        assert [m["text"][0] for m in page] == ["3", "4"]
        first = (await c.get("/v1/messages", params={"limit": 1})).json()["messages"][0]["id"]
        oldest = first - 4
        on = (await c.get("/v1/messages", params={"after": oldest})).json()["messages"]
        assert [m["text"][0] for m in on] == ["1", "2"]


async def test_two_owners_and_two_clients_never_see_each_others_messages(rig: Rig) -> None:
    """Concurrent writers of two owners: each owner's session and stream hold only its own."""
    from support.api_rig import next_push

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
            assert (await next_push(lines_o))["text"] == "for o"
            assert (await next_push(lines_p))["text"] == "for p"


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


async def test_status_probes_the_model_once_in_a_while(rig: Rig, fake: FakeOpenAI) -> None:
    """Status requests in a row probe the endpoint once; after PROBE_FOR it is probed again."""
    from backthink.host.status import PROBE_FOR

    def probes() -> int:
        return sum(1 for r in fake.requests if r.path == "/v1/models")

    async with rig.client() as c:
        for _ in range(3):
            answer = await c.get("/v1/status")
            assert answer.status_code == 200 and answer.json()["model"] == "ok"
        assert probes() == 1
        rig.clock.advance(PROBE_FOR)
        assert (await c.get("/v1/status")).json()["model"] == "ok"
        assert probes() == 2


async def test_openapi_document_names_every_route_and_answer(rig: Rig) -> None:
    """The served document is the package's, lists the served routes and every error they give."""
    served = {
        (route.path, method.lower())
        for route in rig.doors.api.routes()
        for method in getattr(route, "methods", None) or ()
        if "{" not in route.path and method != "HEAD"
    }
    doc = document()
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert served == documented
    post = doc["paths"]["/v1/messages"]["post"]["responses"]
    assert {"400", "401", "403", "413", "415", "429", "503"} <= set(post)
    relay = doc["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"502", "503", "504"} <= set(relay)
    client_id = doc["components"]["schemas"]["NewMessage"]["properties"]["id"]
    assert client_id["type"] == ["string", "integer"]
    async with rig.client(None) as c:
        assert (await c.get("/v1/openapi.json")).json() == json.loads(json.dumps(doc))


async def test_page_and_api_share_one_listener(tmp_path: Path, fake: FakeOpenAI) -> None:
    """With the same address, one listener serves the page and the API."""
    settings = api_settings(tmp_path, fake)
    async with open_fleet(settings, AppOverrides(clock=FakeClock(NOW))) as fleet:
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


async def test_an_open_api_serves_no_other_sites_page(tmp_path: Path, fake: FakeOpenAI) -> None:
    """Without tokens: a plain-text POST is 415, another site's page 403; no write, no call."""
    async with open_rig(tmp_path, fake, tokens=False) as rig:
        own = rig.url
        refused = [
            ({"content-type": "text/plain"}, 415),
            ({"content-type": "application/x-www-form-urlencoded"}, 415),
            ({"content-type": "application/json", "origin": "https://evil.example"}, 403),
            ({"content-type": "application/json", "origin": "null"}, 403),
            ({"content-type": "application/json", "sec-fetch-site": "cross-site"}, 403),
            ({"content-type": "application/json", "sec-fetch-site": "same-site"}, 403),
            ({"content-type": "application/json", "referer": "http://localhost:3000/x"}, 403),
        ]
        message = json.dumps({"role": "user", "text": "from a web page"}).encode()
        chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        async with httpx2.AsyncClient(base_url=own, timeout=WAIT_S) as c:
            for headers, status in refused:
                for path, body in (("/v1/messages", message), ("/v1/chat/completions", chat)):
                    answer = await c.post(path, content=body, headers=headers)
                    assert answer.status_code == status, (path, headers, answer.text)
            seen = await c.get("/v1/messages", headers={"sec-fetch-site": "cross-site"})
            assert seen.status_code == 403
            assert fake.chat_requests == []
            assert await texts(c) == []
            # The API's own origin, and a script that names none, are served.
            mine = await c.post(
                "/v1/messages",
                content=message,
                headers={"content-type": "application/json", "origin": own},
            )
            assert mine.status_code == 200
            assert (await c.post("/v1/messages", json={"role": "user", "text": "ok"})).is_success
            assert await texts(c) == ["from a web page", "ok"]


async def test_a_request_for_an_owner_gone_meanwhile_is_refused_not_a_crash(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """The open API's owner removed while the daemon runs: 401 naming it, not a 500."""
    settings = api_settings(tmp_path, fake)
    async with open_fleet(settings, AppOverrides(clock=FakeClock(NOW))) as fleet:
        doors = await open_api(fleet, ["gone"], lambda _: LiveStatus())
        try:
            async with httpx2.AsyncClient(base_url=doors.url, timeout=WAIT_S) as c:
                status = await c.get("/v1/status")
                posted = await c.post("/v1/messages", json={"role": "user", "text": "hi"})
            for answer in (status, posted):
                assert answer.status_code == 401, answer.text
                assert "'gone'" in answer.json()["error"]
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
