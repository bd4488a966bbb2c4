"""The request of one round: persona, attributed history, and the instruction prompt.

Built from data the round already read (the recent messages) and one state
snapshot, so `think --dry-run` shows byte for byte what a round would send.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from backthink.config import Settings
from backthink.context import conversation
from backthink.models import Message, ModelMessage, StateReading
from backthink.ports import StateProvider
from backthink.prompts import PromptBook, render_prompt


@dataclass(frozen=True)
class Request:
    """The exact messages of one model round and what was learned building them."""

    messages: list[ModelMessage]
    state: StateReading
    recent: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        """The instruction prompt: the request's last message."""
        return self.messages[-1].text


class RequestBuilder:
    """Assembles requests for one persona and one set of templates."""

    def __init__(
        self, settings: Settings, *, prompts: PromptBook, persona_prompt: str, state: StateProvider
    ) -> None:
        self._settings = settings
        self._prompts = prompts
        self._persona_prompt = persona_prompt.strip()
        self._state = state

    def build(self, recent: Sequence[Message], trigger: str, at: datetime) -> Request:
        """Take the state snapshot once and assemble the request around `recent`."""
        reading = self._state.read(at)
        notes = [] if reading.problem is None or reading.problem.expected else [reading.note or ""]
        s = self._settings
        messages: list[ModelMessage] = []
        if self._persona_prompt:
            messages.append(ModelMessage(role="system", text=self._persona_prompt))
        messages.extend(
            conversation(
                recent,
                persona_id=s.persona.id,
                names={s.persona.id: s.persona.name},
                language=s.prompt.language,
            )
        )
        prompt = render_prompt(
            self._prompts,
            trigger=trigger,
            at=at,
            tz=s.owner.tz,
            state=reading.state,
            channels=list(s.channels),
            persona_name=s.persona.name or s.persona.id,
            owner_name=s.owner.name or ("主人" if s.prompt.language == "zh" else "your owner"),
        )
        messages.append(ModelMessage(role="user", text=prompt))
        return Request(messages=messages, state=reading, recent=list(recent), notes=notes)
