"""The relay over real HTTP on 127.0.0.1: the openai SDK as the client, the fake endpoint upstream.

The doors run in the test's own event loop (see `api_rig`), with a FakeClock.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import structlog
from support.api_rig import WAIT_S, Rig, open_rig
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail, Malformed, Reply


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake) as opened:
        yield opened


async def session_of(rig: Rig) -> list[tuple[str, str, str]]:
    """(role, text, origin) of every message of o's session, oldest first."""
    async with rig.client() as c:
        messages = (await c.get("/v1/messages")).json()["messages"]
    return [(m["role"], m["text"], m["origin"]) for m in messages]


async def test_relay_keeps_the_conversation_and_shows_pushes(rig: Rig, fake: FakeOpenAI) -> None:
    """Through the SDK, streamed and not: turns kept once; a regenerated reply replaces its own."""
    async with rig.sdk() as sdk:
        await _relayed_conversation(rig, fake, sdk)
    assert await session_of(rig) == [
        ("user", "hi", "chat"),
        ("assistant", "Hello there!", "chat"),
        ("assistant", "Did you eat?", "proactive"),
        ("user", "I had an exam", "chat"),
        ("assistant", "Good luck tomorrow.", "chat"),
        ("user", "still there?", "chat"),
        ("assistant", "[decision:no_push]", "chat"),
    ]
    async with rig.client() as c:
        session = (await c.get("/v1/messages")).json()["messages"]
        status = (await c.get("/v1/status")).json()
    assert all(m["channel"] is None for m in session if m["origin"] == "chat")
    assert session[1]["speaker"] == "cyrene"
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
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    # Regenerated: the front-end asks again and shows the new reply in place of the old.
    answer = await sdk.chat.completions.create(model="m", messages=history[:4])
    history[4] = {"role": "assistant", "content": answer.choices[0].message.content}
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
        broken = await c.post(
            "/v1/chat/completions", content=b"{}", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400
        assert broken.json()["error"]["type"] == "invalid_request_error"
        plain = await c.post("/v1/chat/completions", content=b"{}")
        assert plain.status_code == 415


async def test_relay_errors_name_fields_as_the_api_does(rig: Rig) -> None:
    """A message past the import's limits is a 400 naming messages[i].text, OpenAI-style."""
    from backthink.store.importing import IMPORT_MAX_CHARS

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 1_000_001}]
    assert len("x" * 1_000_001) > IMPORT_MAX_CHARS
    async with rig.client() as c:
        answer = await c.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        f"messages[1].text: longer than {IMPORT_MAX_CHARS} characters"
    )


@pytest.mark.parametrize("mode", ["accepted", "always"])
async def test_a_compressing_upstream_still_streams_plain_text(
    rig: Rig, fake: FakeOpenAI, mode: str
) -> None:
    """An upstream that gzips its stream: the client gets the plain chunks, the reply is kept."""
    fake.gzip_streams = mode
    fake.script("你好，这是一段压缩过的回答。")
    async with rig.sdk() as sdk:
        chunks = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        reply = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    assert reply == "你好，这是一段压缩过的回答。"
    assert fake.chat_requests[-1].headers["accept-encoding"] == "identity"
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    assert (await session_of(rig))[-1] == ("assistant", reply, "chat")


async def test_a_stalled_stream_ends_with_an_error_event(tmp_path: Path, fake: FakeOpenAI) -> None:
    """The upstream stalls past model.timeout_s: one error event, a clean end, logged as 504."""
    async with open_rig(tmp_path, fake, model={"timeout_s": 0.5}) as rig:
        fake.script(Reply("a reply that never ends", stream_delay_s=WAIT_S))
        with structlog.testing.capture_logs() as logs:
            async with rig.client() as c:
                body = {
                    "model": "m",
                    "stream": True,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                async with c.stream("POST", "/v1/chat/completions", json=body) as answer:
                    assert answer.status_code == 200
                    lines = [line async for line in answer.aiter_lines() if line]
            await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    error = json.loads(lines[-1].removeprefix("data: "))
    assert error["error"]["code"] == 504 and "in time" in error["error"]["message"]
    (finished,) = [e for e in logs if e["event"] == "relay.finished"]
    assert (finished["status"], finished["stream"], finished["reply"]) == (504, True, None)
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]


async def test_a_stream_the_sdk_reads_raises_the_upstreams_failure(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """The openai SDK turns the error event into an APIError instead of a broken connection."""
    async with open_rig(tmp_path, fake, model={"timeout_s": 0.5}) as rig, rig.sdk() as sdk:
        fake.script(Reply("slow", stream_delay_s=WAIT_S))
        chunks = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError, match="in time"):
            async for _ in chunks:
                pass


async def test_a_reply_whose_question_was_not_stored_is_not_kept(
    rig: Rig, fake: FakeOpenAI
) -> None:
    """The database refuses the user message: no reply without its question, and the log says so."""
    with sqlite3.connect(rig.fleet.settings.database.url.split("///", 1)[1]) as db:
        db.execute(
            "CREATE TRIGGER refuse_question BEFORE INSERT ON message WHEN NEW.text = 'refused' "
            "BEGIN SELECT RAISE(ABORT, 'refused by a test'); END"
        )
    fake.script("an answer to nothing")
    with structlog.testing.capture_logs() as logs:
        async with rig.sdk() as sdk:
            answer = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "refused"}]
            )
        await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    assert answer.choices[0].message.content == "an answer to nothing"
    assert await session_of(rig) == []
    (finished,) = [e for e in logs if e["event"] == "relay.finished"]
    assert (finished["stored"], finished["reply"]) == (0, "skipped")


async def test_streamed_turns_are_metered_and_clients_get_what_they_asked(
    rig: Rig, fake: FakeOpenAI
) -> None:
    """The relay asks for usage on every stream; a client that did not ask never sees it."""
    fake.script("one", "two")
    raw: list[bytes] = []
    async with rig.client() as c:
        for options in (None, {"include_usage": True}):
            extra = {"stream_options": options} if options else {}
            body = {"model": "m", "messages": [{"role": "user", "content": f"hi {options}"}]}
            async with c.stream(
                "POST", "/v1/chat/completions", json={**body, "stream": True, **extra}
            ) as answer:
                raw.append(b"".join([piece async for piece in answer.aiter_bytes()]))
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    asked = [r.body.get("stream_options") for r in fake.chat_requests]
    assert asked == [{"include_usage": True}, {"include_usage": True}]
    assert b'"usage"' not in raw[0] and raw[0].endswith(b"data: [DONE]\n\n")
    assert b'"usage": {' in raw[1]
    async with rig.client() as c:
        usage = (await c.get("/v1/status")).json()["relay"]
    assert (usage["requests"], usage["unmetered"]) == (2, 0)
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


async def test_an_upstream_without_stream_options_is_asked_as_the_client_asked(
    rig: Rig, fake: FakeOpenAI
) -> None:
    """Refused for asking usage (400), the call goes again as it came; usage is not asked again."""
    fake.script(
        Fail(400, message="context too long"),
        Fail(400, message="Unrecognized request argument: stream_options"),
        "one",
        "two",
    )
    async with rig.sdk() as sdk:
        with pytest.raises(openai.BadRequestError, match="context too long"):
            await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "long"}], stream=True
            )
        for text in ("hi", "again"):
            chunks = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], stream=True
            )
            assert "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    asked = [r.body.get("stream_options") for r in fake.chat_requests]
    # Another 400 is passed back as it came; only one that names the option turns it off.
    assert asked == [{"include_usage": True}, {"include_usage": True}, None, None]


async def test_an_upstream_answer_past_the_bound_is_not_passed_on(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """A non-streamed answer larger than the relay reads is a 502; one nested too deep passes."""
    async with open_rig(tmp_path, fake, max_answer_bytes=64 * 1024) as rig:
        fake.script("x" * 100_000, Malformed(body="[" * 50_000))
        async with rig.client() as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            big = await c.post("/v1/chat/completions", json=body)
            assert big.status_code == 502 and "larger than" in big.json()["error"]["message"]
            deep = await c.post("/v1/chat/completions", json=body)
            assert deep.status_code == 200 and deep.content == b"[" * 50_000
        await asyncio.wait_for(rig.doors.api.relay.settled(), WAIT_S)
    assert fake.chat_requests[0].headers["accept-encoding"] == "identity"


async def test_models_list_goes_with_the_same_headers(rig: Rig, fake: FakeOpenAI) -> None:
    """GET /v1/models carries the key and asks for no compression, as chat calls do."""
    async with rig.client() as c:
        assert (await c.get("/v1/models")).status_code == 200
    (models,) = [r for r in fake.requests if r.path == "/v1/models"]
    assert models.headers["authorization"] == "Bearer sk-upstream-key"
    assert models.headers["accept-encoding"] == "identity"
