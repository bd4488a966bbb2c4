"""The JSON body of one chat-completions request, exactly as the client POSTs it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backthink.config import ModelSettings
from backthink.decision.structured import SchemaForm, response_format
from backthink.records import ModelMessage

# Sent in place of an image the endpoint must not get. The client does not know the
# prompt language, and every chat model reads this much English.
IMAGE_PLACEHOLDER = "[image: not shown to this model]"


def request_body(
    settings: ModelSettings,
    messages: Sequence[ModelMessage],
    *,
    images: bool | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    schema_form: SchemaForm = "json_schema",
    channels: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON body of one chat-completions request, exactly as it is POSTed.

    `images` says whether image parts are sent; None follows `settings.vision`
    alone (a new client, which has learned nothing yet). Without them, a message's
    image becomes `IMAGE_PLACEHOLDER` on a line after its text. `tools` are
    sent only when there are some; no `tool_choice` is sent (the server's default,
    auto, is what a round wants, and some servers refuse the field). With
    `settings.output = "json_schema"` the body carries the decision's
    `response_format` (see backthink.decision.structured) in `schema_form`, its channel
    one of `channels` or auto when they are given.
    """
    send = settings.vision is not False if images is None else images
    body: dict[str, Any] = {"model": settings.name}
    if tools:
        # Before the messages: chat templates write the tools out first, and a body
        # whose stable parts come first keeps prompt caches (and the bench) honest.
        body["tools"] = [dict(tool) for tool in tools]
    body["messages"] = [_to_payload(message, images=send) for message in messages]
    body["max_tokens"] = settings.max_tokens
    if settings.output == "json_schema":
        body["response_format"] = response_format(schema_form, channels=channels)
    return body


def _to_payload(message: ModelMessage, *, images: bool) -> dict[str, Any]:
    """Convert one ModelMessage to a chat message: plain text, or text and image parts."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    if message.tool_calls:
        return {
            "role": message.role,
            "content": message.text or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    if message.image is None:
        return {"role": message.role, "content": message.text}
    if not images:
        text = f"{message.text}\n{IMAGE_PLACEHOLDER}" if message.text else IMAGE_PLACEHOLDER
        return {"role": message.role, "content": text}
    return {
        "role": message.role,
        "content": [
            {"type": "text", "text": message.text},
            {"type": "image_url", "image_url": {"url": message.image}},
        ],
    }
