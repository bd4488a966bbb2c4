"""Speaker attribution: tell the model which persona said which assistant message.

A session may keep its conversation while the answering persona changes, so
assistant messages of another persona must not read as "something I said".
Attribution travels only as extra system messages: it never reorders,
rewrites or drops a message and never writes into a user or assistant body,
because a user body is untrusted text and must never carry system-looking
markup. Unless an assistant message of another persona is in the window, it is a
complete no-op: a single-persona history needs no notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backthink.models import Language
from backthink.protocol import ROLE_CONTEXT_MARKER, SPEAKER_SWITCH_MARKER
from backthink.records import ModelMessage

_TEXT: dict[Language, dict[str, str]] = {
    "zh": {
        "identity": "你正以{label}的身份对话。",
        "rule": (
            "本会话此前由不同角色相继发言：下面凡是标了「发言归属」的发言，都只属于标注的那个角色——"
            "不要把别的角色说过的话当成你自己说过的，也不要继承他们的身份、口吻或立场；"
            "该标注从其出现处起生效，直到下一条「发言归属」为止。"
        ),
        "self": "以下发言来自你自己——{label}。",
        "other": "以下发言来自{label}，不是你说的。",
    },
    "en": {
        "identity": "You are speaking as {label}.",
        "rule": (
            "Several personas have spoken in this session. Every utterance under a 发言归属 "
            "note belongs only to the persona it names: do not take another persona's words "
            "as your own, nor their identity, voice or stance. A note holds from where it "
            "appears until the next 发言归属 note."
        ),
        "self": "The following was said by you yourself, {label}.",
        "other": "The following was said by {label}, not by you.",
    },
}


def speaker_label(persona_id: str, names: Mapping[str, str]) -> str:
    """Render 「name」（id） when a name is known, 「id」 otherwise; never empty."""
    name = names.get(persona_id, "").strip()
    if not name or name == persona_id:
        return f"「{persona_id}」"
    return f"「{name}」（{persona_id}）"


def attribute(
    conversation: Sequence[tuple[ModelMessage, str | None]],
    *,
    current: str,
    names: Mapping[str, str],
    language: Language = "zh",
) -> tuple[ModelMessage | None, list[ModelMessage]]:
    """Add the role context and speaker notes to a conversation.

    Args:
        conversation: model messages, oldest first, each with the persona id that
            said it (only assistant messages' speakers are read).
        current: the persona id answering now.
        names: display names by persona id.
        language: the language of the notes; the markers never change.

    Returns:
        The leading role-context system message (None when no other persona
        has spoken) and the conversation with a note before every change of
        speaker. An assistant message without a speaker counts as the answering
        persona's own: the daemon writes its pushes back under its persona, and
        an unlabelled turn comes from a time when only one persona spoke.
    """
    text = _TEXT[language]
    current = current.strip()
    speakers = [_speaker_of(msg, speaker, current) for msg, speaker in conversation]
    if all(speaker in ("", current) for speaker in speakers):
        return None, [msg for msg, _ in conversation]
    out: list[ModelMessage] = []
    previous = ""
    for (msg, _), speaker in zip(conversation, speakers, strict=True):
        if speaker and speaker != previous:
            label = speaker_label(speaker, names)
            note = text["self" if speaker == current else "other"].format(label=label)
            out.append(ModelMessage(role="system", text=SPEAKER_SWITCH_MARKER + note))
            previous = speaker
        out.append(msg)
    identity = text["identity"].format(label=speaker_label(current, names)) if current else ""
    leading = ModelMessage(role="system", text=ROLE_CONTEXT_MARKER + identity + text["rule"])
    return leading, out


def _speaker_of(msg: ModelMessage, speaker: str | None, current: str) -> str:
    # A user message's sender name means something else (a third party in a group
    # chat), so only assistant turns are attributed.
    if msg.role != "assistant":
        return ""
    return (speaker or "").strip() or current
