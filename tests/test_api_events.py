"""`/v1/events` over real HTTP on 127.0.0.1: resumption, order, keep-alive, bounds, failures.

The doors run in the test's own event loop (see `api_rig`), with a FakeClock.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import structlog
from support.api_rig import NOW, WAIT_S, Rig, next_push, open_rig
from support.fake_openai import FakeOpenAI

from backthink.models import Message


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake) as opened:
        yield opened


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


async def test_a_message_dated_ahead_hides_no_push_from_the_stream(rig: Rig) -> None:
    """A message imported with a time minutes ahead: a new stream still gets the next push."""
    ahead = Message(
        owner_id="o", role="user", text="dated ahead", created_at=NOW + timedelta(minutes=4)
    )
    await rig.fleet.session.append([ahead])
    async with rig.client() as c, c.stream("GET", "/v1/events") as stream:
        lines = stream.aiter_lines()
        async with asyncio.timeout(WAIT_S):
            assert await anext(lines) == ": connected"
        await rig.push("now")
        assert (await next_push(lines))["text"] == "now"
        # A stream that resumes from the message dated ahead gets the push too.
        async with c.sse("/v1/events", headers={"last-event-id": "1"}) as source:
            async with asyncio.timeout(WAIT_S):
                assert (await anext(aiter(source))).json()["text"] == "now"


async def test_an_owner_holds_a_bounded_number_of_streams(rig: Rig) -> None:
    """Past MAX_STREAMS an owner's next stream is a 429; the other owner is not affected."""
    from backthink.api.events import MAX_STREAMS

    async with rig.client() as c, rig.client("p") as p:
        streams = [c.stream("GET", "/v1/events") for _ in range(MAX_STREAMS)]
        opened = [await s.__aenter__() for s in streams]
        try:
            assert all(s.status_code == 200 for s in opened)
            over = await c.get("/v1/events")
            assert over.status_code == 429 and "close one" in over.json()["error"]
            async with p.stream("GET", "/v1/events") as theirs:
                assert theirs.status_code == 200
        finally:
            for s in streams:
                await s.__aexit__(None, None, None)
        # Once the server saw them close, the owner may open streams again.
        async with asyncio.timeout(WAIT_S):
            while rig.doors.api.events.held("o"):  # noqa: ASYNC110 - the server notices the close
                await asyncio.sleep(0.02)
        async with c.stream("GET", "/v1/events") as again:
            assert again.status_code == 200


async def test_keep_alive_comes_even_when_the_stream_is_woken_often(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """Wakes without a new push (another owner's round, a failed push) do not delay keep-alive."""
    async with open_rig(tmp_path, fake, keepalive_s=0.5) as rig:
        audience = rig.fleet.audience
        assert audience is not None

        async def wake_often() -> None:
            while True:
                audience.announce("o")
                await asyncio.sleep(0.05)

        waking = asyncio.create_task(wake_often())
        try:
            async with rig.client() as c, c.stream("GET", "/v1/events") as stream:
                lines = stream.aiter_lines()
                async with asyncio.timeout(WAIT_S):
                    while await anext(lines) != ": keep-alive":
                        pass
        finally:
            waking.cancel()


async def test_a_database_failing_under_an_open_stream_ends_it_cleanly(rig: Rig) -> None:
    """The session cannot be read: the stream ends without a broken connection, logged once."""
    with structlog.testing.capture_logs() as logs:
        async with rig.client() as c, c.stream("GET", "/v1/events") as stream:
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT_S):
                assert await anext(lines) == ": connected"
            with sqlite3.connect(rig.fleet.settings.database.url.split("///", 1)[1]) as db:
                db.execute("ALTER TABLE message RENAME TO message_away")
            assert rig.fleet.audience is not None
            rig.fleet.audience.announce("o")
            async with asyncio.timeout(WAIT_S):
                rest = [line async for line in lines]
    assert all(line.startswith(":") or not line for line in rest)
    failed = [e for e in logs if e["event"] == "api.stream_failed"]
    assert len(failed) == 1 and failed[0]["owner_id"] == "o"
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]
