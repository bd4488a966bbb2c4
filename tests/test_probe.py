"""`check` probes whether the endpoint really uses tools: calls, refuses, or silently ignores."""

from __future__ import annotations

import pytest
from conftest import Workdir
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail

from backthink.config import ModelSettings
from backthink.endpoint.client import OpenAIModelClient
from backthink.endpoint.probe import PROBE_TOOL, ToolSupport, probe_tools


def client(fake: FakeOpenAI) -> OpenAIModelClient:
    return OpenAIModelClient(
        ModelSettings(base_url=fake.base_url, name="fake-model", max_retries=0)
    )


async def test_an_endpoint_that_drops_tools_is_found_out(fake: FakeOpenAI) -> None:
    """A server that takes `tools` and answers in plain text ignores tools."""
    fake.tools_mode = "ignore"
    async with client(fake) as model:
        found = await probe_tools(model)
    assert found.support is ToolSupport.IGNORES
    assert found.detail.startswith("the endpoint ignores tools")
    [request] = fake.chat_requests
    assert [t["function"]["name"] for t in request.body["tools"]] == [PROBE_TOOL]


async def test_an_endpoint_that_calls_the_tool_passes(fake: FakeOpenAI) -> None:
    """A server whose model calls the probe's tool calls tools."""
    fake.tools_mode = "call"
    async with client(fake) as model:
        found = await probe_tools(model)
    assert found.support is ToolSupport.CALLS


async def test_an_endpoint_that_refuses_tools_says_so(fake: FakeOpenAI) -> None:
    """An error that names tools is a refusal, not a failure of the endpoint."""
    fake.script(Fail(400, message="this model does not support tools"))
    async with client(fake) as model:
        found = await probe_tools(model)
    assert found.support is ToolSupport.REFUSES


@pytest.mark.slow
def test_check_warns_when_the_endpoint_ignores_tools(workdir: Workdir, fake: FakeOpenAI) -> None:
    """check passes with a warning line naming the problem, after the model line."""
    fake.tools_mode = "ignore"
    out = workdir.cli("check").stdout.splitlines()
    assert out[-1].startswith("warn tools: the endpoint ignores tools")
    assert out[-2].startswith("ok  model: ")


@pytest.mark.slow
def test_check_passes_when_the_endpoint_calls_tools(workdir: Workdir, fake: FakeOpenAI) -> None:
    """check says the endpoint calls tools when the probe's call comes back."""
    fake.tools_mode = "call"
    out = workdir.cli("check").stdout.splitlines()
    assert out[-1] == "ok  tools: the endpoint calls tools"


@pytest.mark.slow
def test_check_sends_no_probe_when_tools_are_off(workdir: Workdir, fake: FakeOpenAI) -> None:
    """With tools off, check spends no model call on the probe."""
    workdir.write_config("[tools]\nenabled = false\n")
    out = workdir.cli("check").stdout
    assert "tools:" not in out and fake.chat_requests == []
