"""A chat app's message as the session stores it, validated as a `messages import` line is.

Two rules of the doors come on top of the import's:

- only `user` and `assistant` messages come in: a `system` message would
  stand in every request the companion builds from then on, so it is for
  `messages import` (the owner's own shell) only;
- a time later than now is taken as now. The session is ordered by time,
  and a message dated a few minutes ahead (the import allows a little clock
  skew) would sit after the pushes delivered before it, hiding them from a
  client that reads on after that message.

A refusal names the field the way a client reads it: `body[0].at: ...`,
`messages[3].text: ...`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from backthink.api.refusals import Refusal
from backthink.config import Settings
from backthink.errors import InputError
from backthink.models import Message
from backthink.store.importing import parse_one

API_ROLES = ("user", "assistant")


def incoming(
    fields: dict[str, Any], *, where: str, owner_id: str, settings: Settings, now: datetime
) -> Message:
    """One message of a request, validated, dated no later than `now`.

    Raises:
        Refusal: 400 naming the field that is wrong.
    """
    role = fields.get("role")
    if isinstance(role, str) and role not in API_ROLES:
        raise Refusal(400, f"{where}.role: must be one of {', '.join(API_ROLES)}")
    try:
        message = parse_one(fields, where=where, owner_id=owner_id, now=now, tz=settings.owner.tz)
    except InputError as exc:
        raise refusal_of(exc) from None
    if message.created_at > now:
        message = message.model_copy(update={"created_at": now})
    return message


def refusal_of(exc: InputError) -> Refusal:
    """An import's error as a 400: "body[0]: at: why" becomes "body[0].at: why"."""
    text = str(exc)
    head, sep, rest = text.partition(": ")
    key, sep2, why = rest.partition(": ")
    if sep and sep2 and key.replace(".", "_").isidentifier():
        text = f"{head}.{key}: {why}"
    return Refusal(400, text)
