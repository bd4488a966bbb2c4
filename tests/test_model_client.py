"""The openai adapter against a real local chat-completions server."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import SecretStr
from support.fake_openai import DEFAULT_MODEL, FakeOpenAI
from support.fake_script import (
    EmptyChoices,
    Fail,
    Malformed,
    NullContent,
    Reply,
    ScriptItem,
    rough_tokens,
)

from backthink.config import ModelSettings
from backthink.endpoint.client import PLACEHOLDER_API_KEY, OpenAIModelClient
from backthink.errors import ModelError, ModelNotConfiguredError, ModelTimeoutError
from backthink.records import ModelMessage

AWAIT_TIMEOUT_S = 10.0  # seconds any single await in these tests may take
SDK_MIN_BACKOFF_S = 0.375  # seconds; the SDK's shortest backoff without a Retry-After hint
API_KEY = "sk-test-very-secret-key-123"
FAKE_SCRIPT = Path(__file__).parent / "support" / "fake_openai.py"

T = TypeVar("T")
ClientFactory = Callable[..., OpenAIModelClient]

MESSAGES = [
    ModelMessage(role="system", text="You are a warm companion."),
    ModelMessage(role="user", text="Are you there?"),
    ModelMessage(role="assistant", text="Always."),
    ModelMessage(role="user", text="Think about tomorrow's meeting."),
]


async def within(awaitable: Awaitable[T]) -> T:
    """Await under a timeout so a hung endpoint fails the test instead of stalling it."""
    return await asyncio.wait_for(awaitable, AWAIT_TIMEOUT_S)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    """One fake server for the module; `fake` resets it before each test."""
    with FakeOpenAI() as fake_server:
        yield fake_server


@pytest.fixture
def fake(server: FakeOpenAI) -> FakeOpenAI:
    """The module's fake server with no requests, script or pending failures."""
    server.reset()
    return server


@pytest.fixture
async def make_client(fake: FakeOpenAI) -> AsyncIterator[ClientFactory]:
    """Build clients pointed at the fake server (fast timeouts); close them afterwards."""
    clients: list[OpenAIModelClient] = []

    def build(**overrides: Any) -> OpenAIModelClient:
        fields: dict[str, Any] = {
            "base_url": fake.base_url,
            "api_key": SecretStr(API_KEY),
            "name": "test-model",
            "timeout_s": 5.0,
            "max_retries": 0,
            "max_tokens": 64,
        }
        fields.update(overrides)
        client = OpenAIModelClient(ModelSettings(**fields))
        clients.append(client)
        return client

    yield build
    for client in clients:
        await within(client.close())


def closed_port() -> int:
    """Return a local port that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_payload_is_model_messages_and_max_tokens_only(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """The request body holds exactly model, the messages in order, and max_tokens."""
    await within(make_client().complete(MESSAGES))

    [request] = fake.chat_requests
    assert request.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are a warm companion."},
            {"role": "user", "content": "Are you there?"},
            {"role": "assistant", "content": "Always."},
            {"role": "user", "content": "Think about tomorrow's meeting."},
        ],
        "max_tokens": 64,
    }


async def test_image_travels_as_content_parts(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """A message with an image is sent as a text part followed by an image_url part."""
    image = "data:image/png;base64,iVBORw0KGgo="
    messages = [ModelMessage(role="user", text="Look at this.", image=image)]

    await within(make_client().complete(messages))

    assert fake.chat_requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this."},
                {"type": "image_url", "image_url": {"url": image}},
            ],
        }
    ]


async def test_reply_carries_text_usage_and_latency(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """The reply text, the server's token counts and a positive latency are returned."""
    fake.script(Reply("[decision:push]\nGood morning!"))

    reply = await within(make_client().complete(MESSAGES))

    prompt = " ".join(m.text for m in MESSAGES)
    assert reply.text == "[decision:push]\nGood morning!"
    assert reply.model == "test-model"
    assert reply.prompt_tokens == rough_tokens(prompt)
    assert reply.completion_tokens == rough_tokens(reply.text)
    assert reply.latency_ms > 0


async def test_missing_usage_gives_no_token_counts(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """A reply without a usage object yields None token counts, not an error."""
    fake.script(Reply("fine", usage=False))

    reply = await within(make_client().complete(MESSAGES))

    assert (reply.text, reply.prompt_tokens, reply.completion_tokens) == ("fine", None, None)


async def test_reasoning_content_is_not_the_reply(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """Only `content` is the reply; a `reasoning_content` field beside it is ignored."""
    fake.script(Reply("the answer", reasoning="private chain of thought"))

    reply = await within(make_client().complete(MESSAGES))

    assert reply.text == "the answer"


async def test_authorization_header_carries_the_key(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """The configured API key is sent as a bearer token."""
    await within(make_client().complete(MESSAGES))

    assert fake.chat_requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_missing_key_sends_placeholder(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """Without a configured key the placeholder is sent, which local servers ignore."""
    await within(make_client(api_key=None).complete(MESSAGES))

    assert fake.chat_requests[0].headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_server_error_is_retried(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """An HTTP 500 followed by a good reply succeeds when one retry is allowed."""
    fake.script(Fail(500), Reply("second time lucky"))

    reply = await within(make_client(max_retries=1).complete(MESSAGES))

    assert reply.text == "second time lucky"
    assert len(fake.chat_requests) == 2


async def test_server_error_without_retries_fails(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """An HTTP 500 with retries off is a ModelError naming the status, not a timeout."""
    fake.script(Fail(500))

    with pytest.raises(ModelError, match=r"^model endpoint answered HTTP 500") as caught:
        await within(make_client(max_retries=0).complete(MESSAGES))

    assert not isinstance(caught.value, ModelTimeoutError)
    assert len(fake.chat_requests) == 1


async def test_rate_limit_with_retry_after_is_retried_promptly(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """A 429 carrying a short Retry-After is retried after that wait, not the SDK backoff."""
    fake.fail_next(1, 429)

    started = time.perf_counter()
    reply = await within(make_client(max_retries=2).complete(MESSAGES))
    elapsed_s = time.perf_counter() - started

    assert reply.text == fake.default_reply
    assert [r.headers["x-stainless-retry-count"] for r in fake.chat_requests] == ["0", "1"]
    assert elapsed_s < SDK_MIN_BACKOFF_S


async def test_slow_endpoint_times_out(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """A reply slower than timeout_s raises ModelTimeoutError naming the timeout."""
    fake.script(Reply("too late", delay_s=5.0))

    with pytest.raises(ModelTimeoutError, match=r"^model endpoint timed out after 0\.3s$"):
        await within(make_client(timeout_s=0.3, max_retries=0).complete(MESSAGES))


async def test_refused_connection_is_model_error(make_client: ClientFactory) -> None:
    """A closed port gives a ModelError naming the host, not a timeout."""
    port = closed_port()
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)

    with pytest.raises(ModelError, match=rf"^cannot reach model endpoint 127\.0\.0\.1:{port}: "):
        await within(client.complete(MESSAGES))


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (Malformed(), "the body is not JSON"),
        (EmptyChoices(), "the reply has no choices"),
        (NullContent(reasoning="only thoughts"), "the reply has no text content"),
        (Reply("   \n"), "the reply has no text content"),
    ],
    ids=["malformed-json", "empty-choices", "null-content", "blank-content"],
)
async def test_unusable_reply_is_model_error(
    fake: FakeOpenAI, make_client: ClientFactory, item: ScriptItem, why: str
) -> None:
    """Malformed JSON, no choices, or no text content raise 'no usable reply'."""
    fake.script(item)

    with pytest.raises(ModelError) as caught:
        await within(make_client().complete(MESSAGES))

    assert str(caught.value).startswith(f"model endpoint returned no usable reply: {why}")
    assert not isinstance(caught.value, ModelTimeoutError)


@pytest.mark.parametrize(
    "item",
    [
        Fail(401, message=f"Incorrect API key provided: {API_KEY}"),
        Fail(400, message=f"bad request: {MESSAGES[3].text}"),
        Fail(400, message="Incorrect API key provided: sk-abc1***************wxyz"),
        Malformed(body=f'{{"echo": "{API_KEY} {MESSAGES[1].text}"'),
    ],
    ids=["echoed-key", "echoed-prompt", "masked-key", "malformed-echo"],
)
async def test_errors_never_carry_key_or_request_text(
    fake: FakeOpenAI, make_client: ClientFactory, item: ScriptItem
) -> None:
    """Error messages keep neither the API key, a key-like token, nor request text."""
    fake.script(item)

    with pytest.raises(ModelError) as caught:
        await within(make_client().complete(MESSAGES))

    message = str(caught.value)
    assert API_KEY not in message
    assert "sk-abc1" not in message
    assert all(m.text not in message for m in MESSAGES)


async def test_status_error_keeps_a_short_detail(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """The server's error message is kept, whitespace-collapsed and shortened."""
    fake.script(Fail(400, message="context   length exceeded " + "x" * 500))

    with pytest.raises(ModelError) as caught:
        await within(make_client().complete(MESSAGES))

    message = str(caught.value)
    assert message.startswith("model endpoint answered HTTP 400: context length exceeded x")
    assert len(message) < 250


def test_missing_base_url_is_not_configured() -> None:
    """Without a base_url the client refuses to build and says where to set it."""
    with pytest.raises(ModelNotConfiguredError) as caught:
        OpenAIModelClient(ModelSettings(), config_location="config/backthink.toml")

    assert str(caught.value) == (
        "no model endpoint configured: set model.base_url in config/backthink.toml "
        "or BACKTHINK_MODEL__BASE_URL"
    )


async def test_probe_lists_models(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """The probe reads GET /models and says whether the configured model is listed."""
    listed = await within(make_client(name=DEFAULT_MODEL).probe())
    unlisted = await within(make_client(name="other-model").probe())

    assert listed == f"127.0.0.1:{fake.port} lists 1 model; {DEFAULT_MODEL!r} is listed"
    assert unlisted.endswith("'other-model' is not listed (it lists 'fake-model')")
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/v1/models")] * 2


async def test_probe_falls_back_to_chat_without_model_list(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """When /models answers 404 the probe sends a one-token chat completion instead."""
    fake.models_endpoint = False

    description = await within(make_client().probe())

    assert "has no model list" in description
    assert [(r.method, r.path) for r in fake.requests] == [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
    ]
    assert fake.chat_requests[0].body["max_tokens"] == 1


async def test_probe_maps_errors(fake: FakeOpenAI, make_client: ClientFactory) -> None:
    """A failing /models endpoint (other than 404) is a ModelError with the status."""
    fake.fail_next(1, 503)

    with pytest.raises(ModelError, match=r"^model endpoint answered HTTP 503"):
        await within(make_client().probe())


async def test_context_manager_closes_the_client(fake: FakeOpenAI) -> None:
    """Leaving `async with` closes the client, so later calls fail as ModelError."""
    settings = ModelSettings(base_url=fake.base_url, max_retries=0)
    async with OpenAIModelClient(settings) as client:
        await within(client.complete(MESSAGES))

    with pytest.raises(ModelError, match=r"^the model client is closed$"):
        await within(client.complete(MESSAGES))
    assert len(fake.chat_requests) == 1


@pytest.mark.slow
async def test_fake_server_runs_as_a_process(tmp_path: Path) -> None:
    """The fake runs as a process: it announces its URL, replays a file, then stops on SIGTERM."""
    replies = tmp_path / "replies.jsonl"
    replies.write_text(
        json.dumps("from the file") + "\n" + json.dumps({"status": 500}) + "\n", encoding="utf-8"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FAKE_SCRIPT),
        "--port",
        "0",
        "--reply",
        "the default",
        "--replies",
        str(replies),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = (await within(proc.stdout.readline())).decode().split()
        assert ready[0] == "FAKE_OPENAI_READY"
        settings = ModelSettings(base_url=ready[1], max_retries=1)
        async with OpenAIModelClient(settings) as client:
            first = await within(client.complete(MESSAGES))
            second = await within(client.complete(MESSAGES))
        assert (first.text, second.text) == ("from the file", "the default")
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await within(proc.wait())
    assert returncode == 0


class Dribbler:
    """A real local endpoint that answers headers at once, then its body one byte at a time."""

    DRIP_S = 0.05  # seconds between two bytes: far inside any read timeout

    def __init__(self) -> None:
        self.attempts = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.attempts += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: 1000000\r\n\r\n"
            )
            while True:
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(self.DRIP_S)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def test_a_dribbling_endpoint_is_cut_off_within_the_call_budget(
    make_client: ClientFactory,
) -> None:
    """Headers, then a byte every 50 ms: each attempt ends at timeout_s, the call within budget."""
    from backthink.endpoint.attempt import call_budget

    normal_started = time.perf_counter()
    await within(make_client(timeout_s=0.4, max_retries=1).complete(MESSAGES))
    normal_s = time.perf_counter() - normal_started
    async with Dribbler() as base_url, asyncio.timeout(4 * call_budget(0.4, 1)):
        dribbler_client = make_client(base_url=base_url, timeout_s=0.4, max_retries=1)
        started = time.perf_counter()
        with pytest.raises(ModelTimeoutError, match=r"^model endpoint timed out after 0\.4s$"):
            await dribbler_client.complete(MESSAGES)
        took = time.perf_counter() - started
    # Two attempts of 0.4 s and the SDK's pause between them (0.5 s at most, no hint).
    assert took <= call_budget(0.4, 1) + 20 * normal_s
    assert dribbler_client.model_name == "test-model"


async def test_a_call_whose_retries_outlast_the_budget_ends_at_the_budget(
    fake: FakeOpenAI, make_client: ClientFactory
) -> None:
    """A server asking to retry in a minute does not hold the call past its budget."""
    from backthink.endpoint.attempt import call_budget

    fake.script(Fail(503, retry_after_s=60.0), "[decision:no_push]")
    budget = call_budget(0.3, 1)
    async with asyncio.timeout(4 * budget):
        with pytest.raises(ModelTimeoutError, match=r"no complete answer within"):
            await make_client(timeout_s=0.3, max_retries=1).complete(MESSAGES)
