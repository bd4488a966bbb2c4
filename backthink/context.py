"""Recent main-session messages -> the model messages of one round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backthink.attribution import Language, attribute
from backthink.models import Message, ModelMessage, Role

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
) -> list[ModelMessage]:
    """Build the conversation part of a request: role context, then attributed history.

    The returned list starts with the role-context system message when an
    assistant message of another persona is in the window, followed by the
    messages oldest first with a speaker note before each change of speaker.
    """
    pairs = [(to_model_message(m), m.speaker) for m in recent]
    leading, body = attribute(pairs, current=persona_id, names=names, language=language)
    return ([leading] if leading is not None else []) + body
