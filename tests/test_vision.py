"""Images and text-only endpoints: model.vision = auto | true | false, against a real server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail
from support.settings import BARE, make_settings

from backthink.endpoint.body import IMAGE_PLACEHOLDER
from backthink.endpoint.client import OpenAIModelClient
from backthink.models import Message, Outcome
from backthink.testing import FakeClock, Rig, VolatileMessageStore, make_rig

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
IMAGE = "https://example.invalid/cat.png"
NO_PUSH = "[我决定:no_push]"

Make = Callable[..., Rig]


def contents(request_body: Any) -> list[Any]:
    return [m["content"] for m in request_body["messages"]]


def image_parts(request_body: Any) -> list[Any]:
    return [
        part
        for content in contents(request_body)
        if isinstance(content, list)
        for part in content
        if part.get("type") == "image_url"
    ]


@pytest.fixture
async def make(fake: FakeOpenAI) -> AsyncIterator[Make]:
    """Build rigs whose model is the real client against the fake endpoint."""
    clients: list[OpenAIModelClient] = []

    def build(vision: object = "auto") -> Rig:
        settings = make_settings(
            base=BARE,
            # Every heartbeat asks the model here (skipping is test_unchanged.py's).
            schedule={"skip_unchanged": False},
            model={
                "base_url": fake.base_url,
                "name": "fake-model",
                "max_retries": 0,
                "timeout_s": 10,
                "vision": vision,
            },
        )
        client = OpenAIModelClient(settings.model)
        clients.append(client)
        store = VolatileMessageStore()
        return make_rig(settings, model=client, messages=store, clock=FakeClock(T0))

    yield build
    for client in clients:
        await client.close()


async def with_image(rig: Rig) -> None:
    await rig.messages.add(
        Message(
            owner_id="o",
            role="user",
            text="看这个",
            image=IMAGE,
            created_at=T0 - timedelta(hours=1),
        )
    )


async def test_auto_falls_back_once_and_remembers(fake: FakeOpenAI, make: Make) -> None:
    """A text-only endpoint refuses the image once; the retry and later rounds use a placeholder."""
    fake.image_refusal = 400
    rig = make()
    await with_image(rig)
    first = await rig.thinker.run_round("o", "heartbeat")
    assert (first.outcome, first.reason) == (Outcome.SUPPRESSED, "no_push")
    refused, retried = fake.chat_requests
    assert image_parts(refused.body) == [{"type": "image_url", "image_url": {"url": IMAGE}}]
    assert image_parts(retried.body) == []
    assert f"看这个\n{IMAGE_PLACEHOLDER}" in contents(retried.body)
    assert any(n.startswith("images_withheld: 1 image") and "HTTP 400" in n for n in first.notes)
    second = await rig.thinker.run_round("o", "heartbeat")
    assert second.outcome is Outcome.SUPPRESSED
    assert len(fake.chat_requests) == 3
    assert image_parts(fake.chat_requests[2].body) == []
    assert any(n.startswith("images_withheld: 1 image") for n in second.notes)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (500, "image input is not supported - hint: you may need to provide the mmproj"),
        (400, "facebook/opt-125m is not a multimodal model None"),
        (400, "this model does not support image input"),
        (400, "Invalid content type. image_url is only supported by certain models."),
        (422, "messages[1]: unknown variant `image_url`, expected `text`"),
    ],
)
async def test_auto_recognises_what_servers_answer(
    fake: FakeOpenAI, make: Make, status: int, message: str
) -> None:
    """llama.cpp, vLLM, Ollama, OpenAI and DeepSeek refusals all lead to one placeholder retry."""
    fake.script(Fail(status, message=message), NO_PUSH)
    rig = make()
    await with_image(rig)
    record = await rig.thinker.run_round("o", "heartbeat")
    assert record.reason == "no_push"
    assert [len(image_parts(r.body)) for r in fake.chat_requests] == [1, 0]


async def test_auto_does_not_retry_other_errors(fake: FakeOpenAI, make: Make) -> None:
    """A 400 that is not about images fails the round as before, with no second request."""
    fake.script(Fail(400, message="maximum context length is 4096 tokens"))
    rig = make()
    await with_image(rig)
    record = await rig.thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.FAILED, "model_error")
    assert len(fake.chat_requests) == 1


async def test_auto_without_images_does_not_retry(fake: FakeOpenAI, make: Make) -> None:
    """A refusal naming images, when no image was sent, is an ordinary failure."""
    fake.script(Fail(400, message="this model does not support image input"))
    rig = make()
    record = await rig.thinker.run_round("o", "heartbeat")
    assert record.outcome is Outcome.FAILED
    assert len(fake.chat_requests) == 1


async def test_vision_false_never_sends_images(fake: FakeOpenAI, make: Make) -> None:
    """vision = false sends the placeholder from the first request on."""
    rig = make(vision=False)
    await with_image(rig)
    record = await rig.thinker.run_round("o", "heartbeat")
    assert record.reason == "no_push"
    (request,) = fake.chat_requests
    assert image_parts(request.body) == []
    assert f"看这个\n{IMAGE_PLACEHOLDER}" in contents(request.body)


async def test_vision_true_always_sends_images(fake: FakeOpenAI, make: Make) -> None:
    """vision = true never falls back: the refusal fails the round, and the next one tries again."""
    fake.image_refusal = 400
    rig = make(vision=True)
    await with_image(rig)
    for _ in range(2):
        record = await rig.thinker.run_round("o", "heartbeat")
        assert (record.outcome, record.reason) == (Outcome.FAILED, "model_error")
    assert [len(image_parts(r.body)) for r in fake.chat_requests] == [1, 1]


def test_dry_run_shows_the_placeholder_when_vision_is_off(workdir: Workdir) -> None:
    """think --dry-run with model.vision = false shows what would be sent: no image part."""
    workdir.write_config("[model]\nvision = false\n")
    workdir.cli("messages", "add", "--role", "user", "--text", "看这个", "--image", IMAGE)
    body = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    assert image_parts(body) == []
    assert f"看这个\n{IMAGE_PLACEHOLDER}" in contents(body)


def test_vision_setting_is_validated(workdir: Workdir) -> None:
    """model.vision accepts auto, true and false only."""
    workdir.write_config('[model]\nvision = "sometimes"\n')
    proc = workdir.cli("think", "--dry-run", check=False)
    assert proc.returncode == 2
    assert "model.vision" in proc.stderr
