"""Constrained output: the JSON decision object, its fail-safe reading, and json_schema rounds."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import Workdir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fake_openai import FakeOpenAI
from support.fake_script import Fail
from support.settings import make_settings

from backthink.config import ModelSettings, Settings
from backthink.decision.failsafe import (
    BODY_TOO_LONG,
    CHANNEL_UNCLEAR,
    DUPLICATE_FIELD,
    EMPTY_BODY,
    EMPTY_REPLY,
    INVALID_JSON,
    MISSING_FIELD,
    NO_DECISION,
    NOT_AN_OBJECT,
    UNKNOWN_FIELD,
    URGENCY_UNCLEAR,
    WRONG_TYPE,
    suppression_reason,
)
from backthink.decision.reply import read_reply
from backthink.decision.structured import (
    DECISION_SCHEMA,
    FIELDS,
    THOUGHT_MAX_CHARS,
    parse_json_reply,
    response_format,
)
from backthink.endpoint.body import request_body
from backthink.endpoint.client import OpenAIModelClient
from backthink.errors import ModelError
from backthink.models import MemoryKind, Outcome, Reason, Urgency
from backthink.records import ModelMessage
from backthink.round.prompts import PromptBook, render_prompt
from backthink.testing import FakeClock, ScriptedModel, VolatileMessageStore, make_rig, seed_history

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
R, W, C = Urgency.ROUTINE, Urgency.WARNING, Urgency.CRITICAL
URGENCY_RANK = {R: 0, W: 1, C: 2}


def kept_thought(reply: str, max_chars: int) -> str:
    """The thought the journal keeps of a reply in json_schema mode."""
    return read_reply(reply, output="json_schema", max_body_chars=600).journal_thought(max_chars)


def obj(**fields: Any) -> str:
    """A reply object with every field, overridden by `fields` (None drops one)."""
    base: dict[str, Any] = {
        "thought": "她明早有组会。",
        "decision": "push",
        "channel": "auto",
        "urgency": "routine",
        "body": "明早十点的组会别忘了。",
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, ensure_ascii=False)


@pytest.mark.parametrize(
    ("reply", "push", "urgency", "channel", "body", "problems"),
    [
        pytest.param(obj(), True, R, None, "明早十点的组会别忘了。", [], id="push"),
        pytest.param(
            obj(urgency="critical", channel="Phone"), True, C, "phone", "明早十点的组会别忘了。",
            [], id="critical_named_channel",
        ),
        pytest.param(obj(decision="no_push", body="不打扰"), False, R, None, "", [], id="no_push"),
        pytest.param(
            " \n" + obj() + "\n ", True, R, None, "明早十点的组会别忘了。", [], id="spaces"
        ),
        pytest.param(
            "<think>想一想</think>" + obj(), True, R, None, "明早十点的组会别忘了。", [],
            id="reasoning_block",
        ),
        pytest.param(obj(decision="PUSH "), True, R, None, "明早十点的组会别忘了。", [], id="case"),
        pytest.param(
            obj(thought="想\n一想").replace("\\n", "\n"), True, R, None, "明早十点的组会别忘了。",
            [], id="raw_line_break_in_a_string",
        ),
        pytest.param("", False, R, None, "", [EMPTY_REPLY], id="empty"),
        pytest.param('{"thought": "x", "decision": "pu', False, R, None, "", [INVALID_JSON],
                     id="truncated"),
        pytest.param(obj() + " 好的", False, R, None, "", [INVALID_JSON], id="extra_text"),
        pytest.param("```json\n" + obj() + "\n```", False, R, None, "", [INVALID_JSON],
                     id="code_fence"),
        pytest.param("[我决定:push]\n你好", False, R, None, "", [INVALID_JSON], id="a_footer"),
        pytest.param(json.dumps([obj()]), False, R, None, "", [NOT_AN_OBJECT], id="a_list"),
        pytest.param("[" * 5000, False, R, None, "", [INVALID_JSON], id="nested_too_deep"),
        pytest.param(obj(body=None), False, R, None, "", [MISSING_FIELD], id="missing_body"),
        pytest.param(obj(urgency=None), False, R, None, "", [MISSING_FIELD], id="missing_urgency"),
        pytest.param(obj(extra="x"), False, R, None, "", [UNKNOWN_FIELD], id="unknown_field"),
        pytest.param(obj(decision=True), False, R, None, "", [WRONG_TYPE], id="wrong_type"),
        pytest.param(
            '{"thought": "", "decision": "no_push", "decision": "push", "channel": "", '
            '"urgency": "routine", "body": "hi"}',
            False, R, None, "", [DUPLICATE_FIELD], id="duplicate_decision",
        ),
        pytest.param(obj(decision="yes"), False, R, None, "", [NO_DECISION], id="unknown_decision"),
        pytest.param(obj(decision="push|no_push"), False, R, None, "", [NO_DECISION],
                     id="template_decision"),
        pytest.param(obj(urgency="routine|warning|critical"), True, R, None,
                     "明早十点的组会别忘了。", [URGENCY_UNCLEAR], id="template_urgency"),
        pytest.param(obj(urgency="URGENT"), True, R, None, "明早十点的组会别忘了。",
                     [URGENCY_UNCLEAR], id="unknown_urgency"),
        pytest.param(obj(channel="web|auto"), True, R, None, "明早十点的组会别忘了。",
                     [CHANNEL_UNCLEAR], id="template_channel"),
        pytest.param(obj(body="  "), False, R, None, "", [EMPTY_BODY], id="empty_body"),
        pytest.param(obj(body="无"), False, R, None, "无", [EMPTY_BODY], id="nothing_body"),
        pytest.param(obj(body="好" * 601), False, R, None, "好" * 601, [BODY_TOO_LONG],
                     id="long_body"),
    ],
)  # fmt: skip
def test_reply_objects_are_read_fail_safe(
    reply: str,
    push: bool,
    urgency: Urgency,
    channel: str | None,
    body: str,
    problems: list[str],
) -> None:
    """Each reply shape maps to the decision and problems the footer's rules would give."""
    decision = parse_json_reply(reply)
    assert (decision.push, decision.urgency, decision.channel) == (push, urgency, channel)
    assert decision.body == body
    assert decision.problems == problems


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (obj(), None),
        (obj(decision="no_push"), Reason.NO_PUSH),
        ("not json", Reason.PARSE_FAILED),
        (obj(body=None), Reason.PARSE_FAILED),
        (obj(extra=1), Reason.PARSE_FAILED),
        (obj(body=""), Reason.EMPTY_BODY),
        (obj(body="x" * 601), Reason.BODY_TOO_LONG),
    ],
)
def test_reply_objects_map_to_the_documented_reasons(reply: str, reason: Reason | None) -> None:
    """A refused object ends the round with the same reason codes as a refused footer."""
    assert suppression_reason(parse_json_reply(reply)) == reason


_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["push", "no_push", "PUSH", "routine", "warning", "critical", "auto", ""]),
    st.integers(),
    st.none(),
    st.booleans(),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from([*FIELDS, "extra", "Decision"]), _values, max_size=7),
    st.sampled_from(["", " ", "好的", "```", "<think>x</think>"]),
    st.sampled_from(["", " ", "好的", "```"]),
)
def test_no_object_pushes_without_an_explicit_push_or_raises_urgency(
    data: dict[str, Any], before: str, after: str
) -> None:
    """Generated objects push only with decision push, and never above the written urgency."""
    text = before + json.dumps(data, ensure_ascii=False) + after
    decision = parse_json_reply(text)
    if decision.push:
        assert str(data.get("decision", "")).strip().lower() == "push"
        assert set(data) == set(FIELDS)
        assert decision.body
    written = str(data.get("urgency", "")).strip().lower()
    ceiling = Urgency(written) if written in {u.value for u in Urgency} else R
    assert URGENCY_RANK[decision.urgency] <= URGENCY_RANK[ceiling]


def test_the_thought_is_the_thought_field_and_reasoning_never_the_body() -> None:
    """The journal keeps the reasoning and the thought field; the body never."""
    reply = "<think>先想想</think>" + obj(thought="她明早\n有组会。")
    assert kept_thought(reply, 400) == "先想想 她明早 有组会。"
    assert kept_thought("not an object", 400) == ""
    assert kept_thought(obj(thought="很长" * 50), 10).startswith("…")


def test_the_request_carries_the_strict_schema_only_in_json_mode() -> None:
    """json_schema mode adds the response_format with the five string fields; footer adds none."""
    messages = [ModelMessage(role="user", text="hi")]
    assert "response_format" not in request_body(ModelSettings(), messages)
    body = request_body(ModelSettings(output="json_schema"), messages)
    assert body["response_format"] == response_format()
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert list(schema["properties"]) == list(FIELDS)
    assert schema["required"] == list(FIELDS)
    assert schema["additionalProperties"] is False
    assert all(p["type"] == "string" for p in schema["properties"].values())
    assert schema["properties"]["decision"]["enum"] == ["push", "no_push"]
    assert schema["properties"]["urgency"]["enum"] == ["routine", "warning", "critical"]
    assert schema == dict(DECISION_SCHEMA)


@pytest.mark.parametrize("language", ["zh", "en"])
@pytest.mark.parametrize("trigger", ["heartbeat", "startup"])
def test_json_mode_swaps_only_the_footer_paragraph(language: str, trigger: str) -> None:
    """The JSON instruction replaces the footer paragraph; everything before it is unchanged."""
    book = PromptBook.load(PROMPTS, language)  # type: ignore[arg-type]
    args: dict[str, Any] = {
        "trigger": trigger,
        "at": T0,
        "tz": ZoneInfo("Asia/Shanghai"),
        "state": None,
        "channels": ["web"],
        "persona_name": "昔涟",
        "owner_name": "开拓者",
    }
    footer = render_prompt(book, **args)
    as_json = render_prompt(book, output="json_schema", **args)
    template = (book.startup if trigger == "startup" else book.guidance).template
    head = template.rsplit("\n\n", 1)[0].replace("${owner_name}", "开拓者")
    assert footer.startswith(head) and as_json.startswith(head)
    assert "[decision:" not in as_json and "[我决定:" not in as_json
    assert '"decision"' in as_json and "web|auto" in as_json
    # The round's own lines (trigger and time) still close the prompt.
    assert as_json.rsplit("\n\n", 1)[1] == footer.rsplit("\n\n", 1)[1]


def json_settings(**model: Any) -> Settings:
    return make_settings(
        model={"output": "json_schema", **model},
        gate={"activity_window": "10m", "min_interval": "2h", "daily_cap": 4, "max_unanswered": 2},
    )


async def test_a_json_round_delivers_the_body_keeps_the_thought_and_offers_no_tools() -> None:
    """A json_schema round: no tools offered, the body delivered, the thought kept, never sent."""
    store = VolatileMessageStore()
    await seed_history(
        store, [("user", "明早十点组会，有点紧张", None)], start=T0 - timedelta(hours=1)
    )
    model = ScriptedModel(obj(thought="她有点紧张，提醒一下。", body="组会会顺利的，早点休息。"))
    rig = make_rig(
        json_settings(),
        model=model,
        messages=store,
        clock=FakeClock(T0),
        persona_prompt="你是昔涟。",
    )
    record = await rig.thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.DELIVERED, "web")
    assert record.body == "组会会顺利的，早点休息。"
    assert model.offered == [[]]
    thoughts = await rig.memories.latest_thoughts("o", 5)
    assert [t.text for t in thoughts] == ["她有点紧张，提醒一下。"]
    assert thoughts[0].kind is MemoryKind.THOUGHT
    [sent] = rig.channels["web"].sent  # type: ignore[attr-defined]
    assert "紧张，提醒" not in sent.text


async def test_a_json_round_still_refuses_an_echo_of_the_owner() -> None:
    """The echo guard applies to a JSON body exactly as to a footer body."""
    store = VolatileMessageStore()
    said = "明天早上八点提醒我去医院复查"
    await seed_history(store, [("user", said, None)], start=T0 - timedelta(hours=1))
    model = ScriptedModel(obj(body=said))
    rig = make_rig(json_settings(), model=model, messages=store, clock=FakeClock(T0))
    record = await rig.thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.SUPPRESSED, Reason.PARSE_FAILED)


async def test_a_broken_json_reply_is_a_parse_failure_with_its_problem_noted() -> None:
    """Invalid JSON ends suppressed/parse_failed and the record says why."""
    model = ScriptedModel('{"thought": "x", "decision": "push"')
    rig = make_rig(json_settings(), model=model, clock=FakeClock(T0))
    record = await rig.thinker.run_round("o", "heartbeat")
    assert (record.outcome, record.reason) == (Outcome.SUPPRESSED, Reason.PARSE_FAILED)
    assert INVALID_JSON in record.notes


async def test_an_endpoint_that_reads_only_the_older_form_gets_it_from_then_on(
    fake: FakeOpenAI,
) -> None:
    """A refusal of the json_schema form is answered once in json_object form, then remembered."""
    fake.schema_refusal = 422
    fake.script(obj(), obj())
    client = OpenAIModelClient(
        ModelSettings(base_url=fake.base_url, output="json_schema", max_retries=0, timeout_s=5)
    )
    try:
        first = await asyncio.wait_for(client.complete([ModelMessage(role="user", text="hi")]), 10)
        second = await asyncio.wait_for(client.complete([ModelMessage(role="user", text="hi")]), 10)
    finally:
        await client.close()
    forms = [r.body["response_format"]["type"] for r in fake.chat_requests]
    assert forms == ["json_schema", "json_object", "json_object"]
    older = fake.chat_requests[1].body["response_format"]["schema"]
    assert older["required"] == list(FIELDS)
    assert older["properties"]["thought"]["maxLength"] == THOUGHT_MAX_CHARS
    assert parse_json_reply(first.text).push and parse_json_reply(second.text).push
    assert any(n.startswith("response_format_fallback:") for n in first.notes)
    assert second.notes == []


async def test_a_footer_client_never_falls_back_on_an_unrelated_error(fake: FakeOpenAI) -> None:
    """An error that is not about the schema form stays an error, in either mode."""
    fake.script(Fail(422, message="messages: field required"))
    client = OpenAIModelClient(
        ModelSettings(base_url=fake.base_url, output="json_schema", max_retries=0, timeout_s=5)
    )
    try:
        with pytest.raises(ModelError, match="HTTP 422"):
            await asyncio.wait_for(client.complete([ModelMessage(role="user", text="hi")]), 10)
    finally:
        await client.close()
    assert len(fake.chat_requests) == 1


def test_the_channel_is_one_of_the_configured_ones_and_the_llama_form_bounds_the_thought() -> None:
    """Channels become an enum with auto; only the llama.cpp form caps the thought's length."""
    messages = [ModelMessage(role="user", text="hi")]
    settings = ModelSettings(output="json_schema")
    body = request_body(settings, messages, channels=["web", "Phone"])
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["channel"]["enum"] == ["web", "phone", "auto"]
    assert "maxLength" not in schema["properties"]["thought"]
    older = request_body(settings, messages, channels=["web"], schema_form="json_object")
    assert older["response_format"]["type"] == "json_object"
    bounded = older["response_format"]["schema"]
    assert bounded["properties"]["thought"]["maxLength"] == THOUGHT_MAX_CHARS
    assert bounded["properties"]["channel"]["enum"] == ["web", "auto"]
    assert bounded["required"] == list(FIELDS)


def test_think_in_json_mode_shows_and_sends_the_same_response_format(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    """--dry-run names the response format; its body equals what a real json round POSTs."""
    workdir.write_config('[model]\noutput = "json_schema"\n')
    text = workdir.cli("think", "--dry-run").stdout
    assert "response_format: json_schema backthink_decision (strict)" in text
    shown = json.loads(workdir.cli("think", "--dry-run", "--json").stdout)
    fake.script(obj(decision="no_push", body=""))
    result = workdir.think_json()
    assert (result["outcome"], result["reason"]) == ("suppressed", "no_push")
    (request,) = fake.chat_requests
    assert request.body["response_format"] == shown["response_format"]
    schema = shown["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["channel"]["enum"] == ["web", "auto"]
    assert "tools" not in request.body and "tools" not in shown


def test_the_older_form_is_learned_once_for_every_process(
    workdir: Workdir, fake: FakeOpenAI
) -> None:
    """A second `think` (another process) sends the older form at once: one refusal in all."""
    # The second heartbeat sees what the first saw; it must ask again all the same.
    workdir.write_config('[model]\noutput = "json_schema"\n[schedule]\nskip_unchanged = false\n')
    fake.schema_refusal = 422
    fake.script(obj(decision="no_push", body=""), obj(decision="no_push", body=""))
    assert workdir.think_json()["reason"] == "no_push"
    assert workdir.think_json()["reason"] == "no_push"
    forms = [r.body["response_format"]["type"] for r in fake.chat_requests]
    assert forms == ["json_schema", "json_object", "json_object"]
