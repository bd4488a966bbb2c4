"""What an endpoint answers, read leniently at the edge: replies, tool calls, refusals, errors.

Servers bend the chat-completions schema (extra fields, a missing `usage`,
arguments as an object); the reply is read from the raw JSON body into the
small models here, so such a server still works and one that breaks the
schema fails with a clear ModelError instead of a half-built SDK object.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from backthink.errors import ModelError
from backthink.records import ToolCall

# How text-only endpoints refuse image parts: llama.cpp without a projector (500,
# "image input is not supported"), vLLM ("... is not a multimodal model"), Ollama
# ("this model does not support image input"), OpenAI ("Invalid content type.
# image_url is only supported by certain models"), strict schemas (422, "unknown
# variant `image_url`"). Only these statuses, and only with such words, count.
IMAGE_REFUSAL_STATUSES = frozenset({400, 415, 422, 500})
IMAGE_REFUSAL = re.compile(
    r"image|vision|multi-?modal|mmproj|content[ _-]?(?:type|part)|unknown variant", re.IGNORECASE
)
# How endpoints refuse tool definitions: vLLM without a tool parser (400, '"auto" tool
# choice requires --enable-auto-tool-choice'), llama.cpp without --jinja (500, "tools
# param requires --jinja flag"), Ollama with a model that has none (400, "does not
# support tools"), strict schemas (422, "unknown field `tools`").
TOOL_REFUSAL_STATUSES = frozenset({400, 404, 422, 500, 501})
TOOL_REFUSAL = re.compile(r"\btools?\b|tool[ _-]?choice|function[ _-]?call", re.IGNORECASE)
# How servers that read only the older `{"type": "json_object", "schema": ...}` form
# refuse the OpenAI one: llama-cpp-python (422, "response_format.type: Input should be
# 'text' or 'json_object'"), older llama.cpp builds (500, "response_format type must be
# one of \"text\" or \"json_object\""). Only these statuses, and only with such words.
SCHEMA_REFUSAL_STATUSES = frozenset({400, 422, 500})
SCHEMA_REFUSAL = re.compile(r"response_format|json_schema|json_object", re.IGNORECASE)


class Lenient(BaseModel):
    # Servers add fields of their own (reasoning_content, timings, system_fingerprint);
    # only the fields below matter, so everything else is ignored rather than rejected.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Usage(Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Function(Lenient):
    name: str = ""
    # Some servers send the arguments as an object instead of JSON text.
    arguments: str | dict[str, Any] | None = None


class ToolCallOut(Lenient):
    id: str | None = None
    function: Function | None = None


class Message(Lenient):
    # Only `content` is the reply; reasoning fields beside it are the model's scratchpad.
    content: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class Choice(Lenient):
    message: Message
    finish_reason: str | None = None


class Completion(Lenient):
    model: str | None = None
    choices: list[Choice]
    usage: Usage | None = None


class ModelEntry(Lenient):
    id: str


class ModelList(Lenient):
    data: list[ModelEntry]


T = TypeVar("T", bound=Lenient)


def parse(model: type[T], body: str) -> T:
    """Validate a raw JSON body; errors name where the shape broke, never the content."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        if first["type"] == "json_invalid":
            raise unusable("the body is not JSON") from None
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise unusable(f"unexpected shape at {where}: {first['msg']}") from None


def refuses_images(exc: openai.APIStatusError) -> bool:
    """Whether an error answer says the endpoint takes no image input."""
    if exc.status_code not in IMAGE_REFUSAL_STATUSES:
        return False
    return bool(IMAGE_REFUSAL.search(error_detail(exc.body) or exc.message))


def refuses_tools(exc: openai.APIStatusError) -> bool:
    """Whether an error answer says the endpoint takes no tool definitions."""
    if exc.status_code not in TOOL_REFUSAL_STATUSES:
        return False
    return bool(TOOL_REFUSAL.search(error_detail(exc.body) or exc.message))


def tool_calls(message: Message) -> list[ToolCall]:
    """The tool calls of a reply; a call without a name is dropped, one without an id gets one."""
    calls: list[ToolCall] = []
    for i, call in enumerate(message.tool_calls or []):
        function = call.function
        if function is None or not function.name:
            continue
        arguments = function.arguments
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            ToolCall(id=call.id or f"call_{i}", name=function.name, arguments=arguments or "")
        )
    return calls


def withheld(count: int, why: str) -> str:
    images = "1 image" if count == 1 else f"{count} images"
    return f"images_withheld: {images} replaced by a placeholder: {why}"


def unusable(why: str) -> ModelError:
    return ModelError(f"model endpoint returned no usable reply: {why}")


def error_detail(body: object) -> str:
    """Pull a short message out of an error body: {"error": {"message": ...}} and kin."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or error.get("type")
            return str(message) if message else ""
        if isinstance(error, str):
            return error
        return ""
    if isinstance(body, str):
        return body
    return ""
