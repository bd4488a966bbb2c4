"""Recent main-session messages -> the model messages of one round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from backthink.models import Language, Message, Role
from backthink.protocol import TIME_MARKER
from backthink.records import ModelMessage
from backthink.round.attribution import attribute

LONG_GAP = timedelta(hours=3)
"""A silence this long between two messages gets a time note, even on the same day."""

_WEEKDAYS = {
    "zh": ("周一", "周二", "周三", "周四", "周五", "周六", "周日"),
    "en": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
}

_ROLE_MAP: dict[str, Role] = {"assistant": "assistant", "system": "system", "user": "user"}


def to_model_role(role: str) -> Role:
    """Map a stored role to a model role; anything unknown speaks as the user."""
    return _ROLE_MAP.get(role.strip().lower(), "user")


def to_model_message(message: Message) -> ModelMessage:
    """Convert one stored message, keeping a user's image as an image part beside the text.

    Chat-completions endpoints accept image parts only in user messages, so an
    image attached to an assistant or system message is left out of the request.
    """
    role = to_model_role(message.role)
    image = message.image if role == "user" else None
    return ModelMessage(role=role, text=message.text, image=image)


def conversation(
    recent: Sequence[Message],
    *,
    persona_id: str,
    names: Mapping[str, str],
    language: Language = "zh",
    tz: ZoneInfo | None = None,
) -> list[ModelMessage]:
    """Build the conversation part of a request: role context, then attributed history.

    The returned list starts with the role-context system message when an
    assistant message of another persona is in the window, followed by the
    messages oldest first with a speaker note before each change of speaker.
    With `tz`, a time note (a system message of its own) comes before the first
    message, and before any message where the owner's local day changes or a
    long silence ends. The notes depend on the messages alone, so two
    heartbeats with no new message between them send the same bytes.
    """
    pairs = [(to_model_message(m), m.speaker) for m in recent]
    leading, body = attribute(pairs, current=persona_id, names=names, language=language)
    head = [leading] if leading is not None else []
    if tz is None:
        return head + body
    notes = time_notes(recent, tz=tz, language=language)
    index = {id(model): i for i, (model, _) in enumerate(pairs)}
    out: list[ModelMessage] = []
    held: list[ModelMessage] = []  # a speaker note goes with the message after it
    for item in body:
        i = index.get(id(item))
        if i is None:
            held.append(item)
            continue
        if i in notes:
            out.append(ModelMessage(role="system", text=notes[i]))
        out.extend(held)
        held.clear()
        out.append(item)
    return head + out + held


def time_notes(recent: Sequence[Message], *, tz: ZoneInfo, language: Language) -> dict[int, str]:
    """The time notes of a window, by the index of the message each one comes before.

    The first message gets its date and time; after it, a note marks a change
    of the owner's local day (with the date) or a silence of `LONG_GAP` or more
    (with the time and the length of the silence).
    """
    marker = TIME_MARKER[language]
    notes: dict[int, str] = {}
    previous: datetime | None = None
    for i, message in enumerate(recent):
        local = message.created_at.astimezone(tz)
        if previous is None or local.date() != previous.date():
            notes[i] = marker + _date_and_time(local, language)
        elif local - previous >= LONG_GAP:
            hours = round((local - previous).total_seconds() / 3600)
            if language == "zh":
                notes[i] = f"{marker}{local:%H:%M}（距上一条约 {hours} 小时）"
            else:
                notes[i] = f"{marker}{local:%H:%M} ({hours} h after the previous message)"
        previous = local
    return notes


def _date_and_time(local: datetime, language: Language) -> str:
    weekday = _WEEKDAYS[language][local.weekday()]
    if language == "zh":
        return f"{local.year}年{local.month}月{local.day}日 {weekday} {local:%H:%M}"
    return f"{weekday} {local.day} {local:%b %Y %H:%M}"
