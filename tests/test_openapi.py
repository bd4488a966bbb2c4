"""The OpenAPI message body agrees with what `POST /v1/messages` takes, field by field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.api_rig import Rig, open_rig
from support.fake_openai import FakeOpenAI

from backthink.api.openapi import document
from backthink.store.importing import MessageInput

BODY_BYTES = 16_000_000  # api.max_body_bytes here: room for the longest image the schema allows
BOUNDED = {"id", "text", "image"}  # the fields whose length a validator bounds


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path, fake, api={"max_body_bytes": BODY_BYTES}) as opened:
        yield opened


def new_message() -> dict[str, Any]:
    """The document's schema of one message of a POST."""
    schema: dict[str, Any] = document()["components"]["schemas"]["NewMessage"]
    return schema


def test_the_schema_lists_the_fields_the_validator_takes() -> None:
    """Every field of the validating model and the chat app's id; the model's required ones."""
    schema = new_message()
    assert set(schema["properties"]) == set(MessageInput.model_fields) | {"id"}
    required = [name for name, field in MessageInput.model_fields.items() if field.is_required()]
    assert schema["required"] == required
    assert schema["additionalProperties"] is False
    bounded = {name for name, field in schema["properties"].items() if "maxLength" in field}
    assert bounded == BOUNDED


async def post(rig: Rig, message: dict[str, Any]) -> tuple[int, str]:
    """POST one message; the status and, for a refusal, its error."""
    async with rig.client() as c:
        answer = await c.post("/v1/messages", json=message)
    return answer.status_code, answer.json().get("error", "") if answer.status_code != 200 else ""


@pytest.mark.parametrize("field", sorted(BOUNDED))
async def test_each_length_in_the_schema_is_the_one_the_api_keeps(rig: Rig, field: str) -> None:
    """A value of maxLength characters is stored; one character more is a 400 naming the field."""
    limit = new_message()["properties"][field]["maxLength"]
    base = {"role": "user", "text": "看这张图"}
    assert await post(rig, {**base, field: "x" * limit}) == (200, "")
    status, error = await post(rig, {**base, field: "y" * (limit + 1)})
    assert status == 400
    assert error.startswith(f"body.{field}: ")


async def test_the_roles_in_the_schema_are_the_ones_the_api_takes(rig: Rig) -> None:
    """Each role the schema lists is stored; the import's system role is refused here."""
    roles = new_message()["properties"]["role"]["enum"]
    for role in roles:
        assert await post(rig, {"role": role, "text": "早"}) == (200, "")
    status, error = await post(rig, {"role": "system", "text": "早"})
    assert (status, error.split(":")[0]) == (400, "body.role")
