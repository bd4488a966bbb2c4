"""Parsing messages typed on the command line or imported from JSON Lines."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, tzinfo
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from backthink.errors import InputError
from backthink.models import FUTURE_SKEW, Message

ROLES = ("user", "assistant", "system")
# characters; far above any chat message, far below what would bloat every round's read
IMPORT_MAX_CHARS = 1_000_000
# characters; a URL or a data URI of an image of about 3.7 MB
IMPORT_MAX_IMAGE_CHARS = 5_000_000


class MessageInput(BaseModel):
    """One message as a user writes it: role, text and optional details."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str
    text: str
    channel: str | None = None
    speaker: str | None = None
    image: str | None = None
    at: datetime | None = None

    @field_validator("text")
    @classmethod
    def _bounded_text(cls, value: str) -> str:
        if len(value) > IMPORT_MAX_CHARS:
            raise ValueError(f"longer than {IMPORT_MAX_CHARS} characters")
        return value

    @field_validator("image")
    @classmethod
    def _bounded_image(cls, value: str | None) -> str | None:
        if value is not None and len(value) > IMPORT_MAX_IMAGE_CHARS:
            raise ValueError(f"longer than {IMPORT_MAX_IMAGE_CHARS} characters")
        return value

    @field_validator("role")
    @classmethod
    def _known_role(cls, value: str) -> str:
        if value not in ROLES:
            raise ValueError(f"must be one of {', '.join(ROLES)}")
        return value

    @model_validator(mode="after")
    def _says_something(self) -> MessageInput:
        if not self.text.strip() and not self.image:
            raise PydanticCustomError("empty", "text: empty (give a text, or an image)")
        return self

    def to_message(self, owner_id: str, *, now: datetime, tz: tzinfo) -> Message:
        """Build the stored message; a time without a zone is the owner's local time."""
        at = self.at or now
        if at.tzinfo is None:
            at = at.replace(tzinfo=tz)
        return Message(
            owner_id=owner_id,
            role=self.role,
            text=self.text,
            channel=self.channel or None,
            speaker=self.speaker or None,
            image=self.image or None,
            created_at=at,
        )


def parse_jsonl(
    lines: Iterable[str], *, source: str, owner_id: str, now: datetime, tz: tzinfo
) -> list[Message]:
    """Parse every line first, so a malformed line leaves nothing half-imported.

    Raises:
        InputError: `<source>:<line>: <what is wrong>` for the first bad line.
    """
    out: list[Message] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data: Any = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{source}:{number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise InputError(f"{source}:{number}: not valid JSON (nested too deep)") from None
        if not isinstance(data, dict):
            raise InputError(f"{source}:{number}: expected a JSON object")
        out.append(parse_one(data, where=f"{source}:{number}", owner_id=owner_id, now=now, tz=tz))
    return out


def parse_one(
    data: dict[str, Any], *, where: str, owner_id: str, now: datetime, tz: tzinfo
) -> Message:
    """Validate one message given as a dict.

    A time later than `now` plus `FUTURE_SKEW` is refused: a message from the
    future would count as the owner chatting right now until that date comes.

    Raises:
        InputError: `<where>: <key>: <what is wrong>`.
    """
    try:
        message = MessageInput.model_validate(data).to_message(owner_id, now=now, tz=tz)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        raise InputError(f"{where}: {key}: {msg}" if key else f"{where}: {msg}") from None
    if message.created_at > now + FUTURE_SKEW:
        raise InputError(f"{where}: at: {message.created_at.isoformat()} is in the future")
    return message
