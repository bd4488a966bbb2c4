"""The doors under attack: bad bytes, a dribbling upstream, shared probes, revoked tokens, pages.

Everything runs over real HTTP on 127.0.0.1 against the doors in the test's
own event loop (see `api_rig`), with a FakeClock.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx2
import pytest
from conftest import ROOT
from support.api_rig import NOW, WAIT_S, Rig, open_rig, texts
from support.dribbler import Dribbler
from support.fake_openai import FakeOpenAI

from backthink.api.bodies import MAX_DEPTH
from backthink.config import Settings
from backthink.host.app import AppOverrides, build_app
from backthink.store import VolatileStores
from backthink.testing import FakeClock, ScriptedModel
from backthink.web import start_web

JSON = {"content-type": "application/json"}
LONG_NUMBER = b"1" * 4301  # one digit past what Python's int() reads by default


def nested(depth: int) -> bytes:
    """`depth` arrays, one inside the other."""
    return b"[" * depth + b"]" * depth


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake) as opened:
        yield opened


BAD_MESSAGES = [
    pytest.param(b'{"role": "user", "text": "a\\ud800b"}', "body.text", id="lone_surrogate"),
    pytest.param(
        b'[{"role": "user", "text": "fine"}, {"role": "user", "text": "\\udfff"}]',
        "body[1].text",
        id="low_surrogate_in_a_list",
    ),
    pytest.param(b'{"role": "user", "text": "x", "\\ud83d": 1}', "body", id="surrogate_key"),
    pytest.param(
        b'{"role": "user", "text": "x", "id": ' + LONG_NUMBER + b"}", "body.id", id="long_integer"
    ),
    pytest.param(b'{"role": "user", "text": "x", "at": NaN}', "body.at", id="nan"),
    pytest.param(b'{"role": "user", "text": "x", "at": -Infinity}', "body.at", id="infinity"),
    pytest.param(b'{"role": "user", "text": "x", "at": 1e999}', "body.at", id="overflowing_float"),
    pytest.param(b'{"role": "user", "text": "\xed\xa0\x80"}', "body", id="utf8_encoded_surrogate"),
]


@pytest.mark.parametrize(("body", "field"), BAD_MESSAGES)
async def test_bad_bytes_in_a_message_are_a_400_naming_the_field(
    rig: Rig, body: bytes, field: str
) -> None:
    """A lone surrogate, a number Python will not read, NaN or Infinity: 400 naming it, no 500."""
    async with rig.client(**JSON) as c:
        answer = await c.post("/v1/messages", content=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"].startswith(f"{field}:")
        assert await texts(c) == []


@pytest.mark.parametrize(
    "depth", [MAX_DEPTH + 1, 500, 990, 1000, 5000, 200_000], ids=lambda d: f"depth_{d}"
)
async def test_deep_nesting_is_a_400_at_every_depth(rig: Rig, fake: FakeOpenAI, depth: int) -> None:
    """Nesting past MAX_DEPTH is a 400 from the API and the relay: never a 500, never forwarded."""
    relayed = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": %s}'
    async with rig.client(**JSON) as c:
        answer = await c.post("/v1/messages", content=nested(depth))
        assert answer.status_code == 400 and "nested" in answer.json()["error"]
        answer = await c.post("/v1/chat/completions", content=relayed % nested(depth))
        assert answer.status_code == 400 and "nested" in answer.json()["error"]["message"]
    assert fake.chat_requests == []


async def test_nesting_within_the_bound_is_relayed(rig: Rig, fake: FakeOpenAI) -> None:
    """A chat request nested up to MAX_DEPTH levels, a push put into it, reaches the upstream."""
    await rig.push("Did you eat?")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": %s}'
    fake.script("fine")
    async with rig.client(**JSON) as c:
        answer = await c.post("/v1/chat/completions", content=body % nested(MAX_DEPTH - 1))
    assert answer.status_code == 200, answer.text
    assert len(fake.chat_requests) == 1


BAD_CHATS = [
    pytest.param(
        b'{"model": "m", "messages": [{"role": "user", "content": "hi \\ud800"}]}',
        "messages[0].content",
        id="lone_surrogate",
    ),
    pytest.param(
        b'{"model": "m", "messages": [{"role": "user", "content": '
        b'[{"type": "text", "text": "\\udc00"}]}]}',
        "messages[0].content[0].text",
        id="surrogate_in_a_part",
    ),
    pytest.param(
        b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}',
        "temperature",
        id="nan",
    ),
    pytest.param(
        b'{"model": "m", "top_p": Infinity, "messages": [{"role": "user", "content": "hi"}]}',
        "top_p",
        id="infinity",
    ),
    pytest.param(
        b'{"model": "m", "seed": ' + LONG_NUMBER + b', "messages": [{"role": "user", '
        b'"content": "hi"}]}',
        "seed",
        id="long_integer",
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD_CHATS)
async def test_bad_bytes_in_a_chat_are_refused_before_the_upstream(
    rig: Rig, fake: FakeOpenAI, body: bytes, field: str
) -> None:
    """The relay answers 400 naming the field (OpenAI-shaped): nothing goes upstream or is lost."""
    async with rig.client(**JSON) as c:
        answer = await c.post("/v1/chat/completions", content=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["message"].startswith(f"{field}:") and error["code"] == 400
        assert fake.chat_requests == []
        # The same turn sent right is kept: the refused one left nothing half-stored behind.
        fake.script("hello")
        good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert (await c.post("/v1/chat/completions", json=good)).status_code == 200
        await rig.doors.api.relay.settled()
        assert await texts(c) == ["hi", "hello"]


async def test_a_dribbling_upstream_is_cut_at_model_timeout(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """An upstream sending a byte a second is cut at model.timeout_s: 504, its connection closed."""
    async with (
        Dribbler(every_s=1.0, total=120) as upstream,
        open_rig(
            tmp_path, fake, model={"timeout_s": 2}, relay={"upstream": upstream.base_url}
        ) as rig,
        rig.client() as c,
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with asyncio.timeout(WAIT_S):
            answer = await c.post("/v1/chat/completions", json=body)
            assert answer.status_code == 504, answer.text
            assert answer.json()["error"]["code"] == 504
            answer = await c.get("/v1/models")
            assert answer.status_code == 504, answer.text
            await upstream.closed.wait()
        assert upstream.requests == 2
        await rig.doors.api.relay.settled()
        # The question was kept; there is no reply to keep.
        assert await texts(c) == ["hi"]


async def test_concurrent_status_requests_share_one_probe(tmp_path: Path, fake: FakeOpenAI) -> None:
    """Twenty /v1/status requests at once, while the endpoint answers slowly, make one probe."""
    async with (
        Dribbler(every_s=0.1, total=5) as endpoint,
        open_rig(tmp_path, fake, model={"base_url": endpoint.base_url}) as rig,
        rig.client() as c,
    ):
        async with asyncio.timeout(WAIT_S):
            answers = await asyncio.gather(*(c.get("/v1/status") for _ in range(20)))
        assert {a.status_code for a in answers} == {200}
        assert len({a.json()["model"] for a in answers}) == 1
        assert endpoint.requests == 1


async def test_a_probe_is_shared_and_reused_for_five_seconds() -> None:
    """Callers during a probe share it (one leaving ends nothing); a new probe after PROBE_FOR."""
    from backthink.config import ModelSettings
    from backthink.host.status import PROBE_FOR, ModelProbe
    from backthink.ports import ModelClient
    from backthink.testing import FakeClock

    gate = asyncio.Event()
    calls: list[str | None] = []

    async def probe(settings: ModelSettings, client: ModelClient | None) -> str:
        calls.append(settings.base_url)
        await gate.wait()
        return f"ok {len(calls)}"

    clock = FakeClock()
    probes = ModelProbe(clock, probe=probe)
    model = ModelSettings(base_url="http://127.0.0.1:9/v1")
    async with asyncio.timeout(WAIT_S):
        waiting = [asyncio.ensure_future(probes.health(model, None)) for _ in range(10)]
        await asyncio.sleep(0)
        waiting[0].cancel()
        gate.set()
        answers = await asyncio.gather(*waiting[1:])
        assert answers == ["ok 1"] * 9 and calls == [model.base_url]
        clock.advance(PROBE_FOR / 2)
        assert await probes.health(model, None) == "ok 1"
        other = model.model_copy(update={"base_url": "http://127.0.0.1:9/other"})
        assert await probes.health(other, None) == "ok 2"
        clock.advance(PROBE_FOR / 2)
        assert await probes.health(model, None) == "ok 3"


async def test_revoking_the_last_token_keeps_the_api_closed(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """Once a token has existed, the loopback API stays closed (401) with every token revoked."""
    async with open_rig(tmp_path, fake, tokens=False) as rig:
        tokens = rig.fleet.tokens
        async with rig.client(None) as c:
            assert (await c.get("/v1/messages")).status_code == 200
            token = await tokens.issue("o", at=NOW)
            await tokens.issue("p", at=NOW)
            assert (await c.get("/v1/messages")).status_code == 401
            assert await tokens.revoke("o") == 1 and await tokens.revoke("p") == 1
            assert not await tokens.any()
            assert (await c.get("/v1/messages")).status_code == 401
            assert (await c.get("/v1/status")).status_code == 401
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            assert (await c.post("/v1/chat/completions", json=chat)).status_code == 401
        async with rig.client(None, authorization=f"Bearer {token}") as revoked:
            assert (await revoked.get("/v1/messages")).status_code == 401
        fresh = await tokens.issue("o", at=NOW)
        async with rig.client(None, authorization=f"Bearer {fresh}") as c:
            assert (await c.get("/v1/messages")).status_code == 200
    assert fake.chat_requests == []


async def test_a_token_made_before_the_mark_still_closes_the_api(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """A database whose tokens predate the mark: revoking them writes it, the API stays closed."""
    async with open_rig(tmp_path, fake) as rig:
        database = rig.fleet.settings.database.url.split("///", 1)[1]
        with sqlite3.connect(database) as db:
            db.execute("DELETE FROM mark WHERE owner_id = '*'")
        async with rig.client(None) as c:
            assert (await c.get("/v1/messages")).status_code == 401
            await rig.fleet.tokens.revoke("o")
            await rig.fleet.tokens.revoke("p")
            assert (await c.get("/v1/messages")).status_code == 401


async def stream_ends(
    rig: Rig, client: httpx2.AsyncClient, close: Callable[[], Awaitable[object]]
) -> None:
    """Open an event stream, run `close`; the stream must end, and its owner be no longer there."""
    app = await rig.fleet.app("o")
    async with client.stream("GET", "/v1/events") as stream:
        lines = stream.aiter_lines()
        async with asyncio.timeout(WAIT_S):
            assert await anext(lines) == ": connected"
        assert app.dispatcher.connected() == ["web"]
        await close()
        await rig.push("after the revoke")
        async with asyncio.timeout(WAIT_S):
            rest = [line async for line in lines]
    assert not any(line.startswith("event: push") for line in rest)
    assert rig.doors.api.events.held("o") == 0
    assert app.dispatcher.connected() == []


async def test_a_revoked_tokens_stream_is_closed(tmp_path: Path, fake: FakeOpenAI) -> None:
    """An event stream whose token is revoked ends at its next keep-alive, sends no more pushes."""
    async with open_rig(tmp_path, fake) as rig, rig.client() as c:
        await stream_ends(rig, c, lambda: rig.fleet.tokens.revoke("o"))


async def test_an_open_loopback_stream_is_closed_by_the_first_token(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """A stream opened without a token, while none existed, ends once the first token is made."""
    async with open_rig(tmp_path, fake, tokens=False) as rig, rig.client(None) as c:
        await stream_ends(rig, c, lambda: rig.fleet.tokens.issue("p", at=NOW))


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
async def test_the_mark_of_a_token_outlives_every_token(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On SQLite and PostgreSQL: tokens made and revoked leave the database marked as closed."""
    from backthink.config import DatabaseSettings
    from backthink.store import open_database

    url = (
        request.getfixturevalue("pg_url")
        if where == "postgresql"
        else f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    )
    async with open_database(DatabaseSettings(url=url)) as store:
        tokens = store.tokens
        assert not await tokens.ever()
        await tokens.issue("o", at=NOW)
        await tokens.issue("o", at=NOW)
        assert await tokens.revoke("o") == 2
        assert await tokens.ever() and not await tokens.any()
        assert await tokens.revoke("o") == 0 and await tokens.ever()


async def long_session(rig: Rig, count: int, size: int) -> None:
    """`count` messages of `size` characters each in o's session, a second apart."""
    from datetime import timedelta

    from backthink.models import Message

    start = NOW - timedelta(seconds=count)
    await rig.fleet.session.append(
        [
            Message(
                owner_id="o",
                role="user" if i % 2 else "assistant",
                text=f"{i:06d}" + "x" * (size - 6),
                created_at=start + timedelta(seconds=i),
            )
            for i in range(count)
        ]
    )


async def test_a_page_read_in_batches_is_the_page_the_session_holds(rig: Rig) -> None:
    """Pages of many batches, with and without `after`, hold what one read of the session does."""
    from backthink.api.pages import BATCH, BATCH_CHARS, PAGE_MAX_CHARS

    count, size = 2 * BATCH + 50, BATCH_CHARS // 8
    await long_session(rig, count, size)
    session = rig.fleet.session
    oldest = (await session.page("o", after=None, limit=count))[0].message.id
    asked: list[dict[str, int]] = [
        {"limit": 1000},
        {"limit": BATCH + 1},
        {"limit": 1000, "after": oldest},
        {"limit": BATCH + 7, "after": oldest + 3},
        {"limit": 1},
        {"limit": 0},
    ]
    async with rig.client() as c:
        for params in asked:
            answer = await c.get("/v1/messages", params=params)
            assert (
                answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            )
            got = [m["id"] for m in answer.json()["messages"]]
            whole = await session.page(
                "o", after=params.get("after"), limit=params["limit"], max_chars=PAGE_MAX_CHARS
            )
            assert got == [e.message.id for e in whole or []], params


async def test_a_page_stops_at_its_characters_across_batches(rig: Rig) -> None:
    """100,000-character messages: a page with `after` stops at PAGE_MAX_CHARS, as one read does."""
    from backthink.api.pages import PAGE_MAX_CHARS

    await long_session(rig, 90, 100_000)
    session = rig.fleet.session
    oldest = (await session.page("o", after=None, limit=90))[0].message.id
    async with rig.client() as c:
        answer = await c.get("/v1/messages", params={"after": oldest, "limit": 1000})
        got = answer.json()["messages"]
    whole = await session.page("o", after=oldest, limit=1000, max_chars=PAGE_MAX_CHARS)
    assert [m["id"] for m in got] == [e.message.id for e in whole or []]
    assert len(got) == PAGE_MAX_CHARS // 100_000


async def settled(measure: Callable[[], int], *, within: int) -> int:
    """`measure()` once it stays within `within` of itself for half a second."""
    samples = [measure()]
    async with asyncio.timeout(WAIT_S * 3):
        while len(samples) < 10 or max(samples[-10:]) - min(samples[-10:]) > within:
            await asyncio.sleep(0.05)
            samples.append(measure())
    return samples[-1]


async def test_unread_pages_hold_a_batch_each_not_the_page(rig: Rig) -> None:
    """Four clients ask for a page of 8 MB and read nothing: the doors hold less than one page."""
    import socket
    import tracemalloc

    await long_session(rig, 1000, 8000)
    page_bytes = 1000 * 8000
    host, port = rig.url.removeprefix("http://").rsplit(":", 1)
    request = (
        f"GET /v1/messages?limit=1000 HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {rig.tokens['o']}\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    unread: list[socket.socket] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            unread.append(sock)
            async with asyncio.timeout(WAIT_S):
                await loop.sock_connect(sock, (host, int(port)))
                await loop.sock_sendall(sock, request)
        held = await settled(lambda: tracemalloc.get_traced_memory()[0], within=256 * 1024)
    finally:
        tracemalloc.stop()
        for sock in unread:
            sock.close()
    assert held - before < page_bytes, held - before


async def test_slow_bodies_give_their_places_to_a_whole_request() -> None:
    """Every slot held by a body sent slowly: a plain request is served, the oldest one gets 408."""
    cap = 4
    settings = Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "prompt": {"dir": str(ROOT / "backthink/prompts")},
            "state": {"file": None},
            "web": {"listen": "127.0.0.1:0"},
        }
    )
    app = build_app(
        settings,
        VolatileStores.empty(),
        AppOverrides(model=ScriptedModel(), clock=FakeClock(), persona_prompt="你好"),
    )
    # Deadlines far away: only the newcomer can make a slow body give way.
    page = await start_web(app, "o", max_connections=cap, idle_s=WAIT_S * 6, request_s=WAIT_S * 6)
    host, port = page.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        async with asyncio.timeout(WAIT_S):
            for _ in range(cap):
                reader, writer = await asyncio.open_connection(host, int(port))
                where = f"{host}:{port}".encode()
                writer.write(
                    b"POST /pause HTTP/1.1\r\nhost: %s\r\norigin: http://%s\r\n"
                    b"content-type: application/x-www-form-urlencoded\r\n"
                    b"content-length: 1000\r\n\r\nfor=1" % (where, where)
                )
                await writer.drain()
                slow.append((reader, writer))
                await asyncio.sleep(0.05)  # each one's request begins after the one before
            async with httpx2.AsyncClient() as client:
                answer = await client.get(page.url)
            assert answer.status_code == 200
            assert (await slow[0][0].read()).startswith(b"HTTP/1.1 408 ")
        for reader, _ in slow[1:]:
            assert not reader.at_eof()
    finally:
        for _, writer in slow:
            writer.close()
        await page.stop()


async def test_a_page_whose_client_left_reads_no_further(rig: Rig) -> None:
    """A send to a client gone returns at once: the page still yields, so it is cancelled unread."""
    from backthink.api.pages import Page
    from backthink.models import SessionEntry

    class Counted:
        """The session's pages, counted."""

        def __init__(self) -> None:
            self.reads = 0

        async def page(
            self,
            owner_id: str,
            *,
            after: int | None,
            limit: int,
            max_chars: int | None = None,
            every: bool = False,
        ) -> list[SessionEntry] | None:
            self.reads += 1
            return await rig.fleet.session.page(
                owner_id, after=after, limit=limit, max_chars=max_chars, every=every
            )

    await long_session(rig, 1000, 8000)
    source = Counted()
    page = await Page.open(source, "o", after=None, limit=1000)
    assert page is not None

    async def send_to_nobody() -> None:
        async for _ in page.body():
            pass  # a send to a client that left returns without waiting

    sending = asyncio.create_task(send_to_nobody())
    await asyncio.sleep(0)
    sending.cancel()  # what the server does once it sees the client gone
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert source.reads == 1
