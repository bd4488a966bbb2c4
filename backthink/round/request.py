"""The request of one round: persona, attributed history, and the instruction prompt.

Built from data the round already read (the recent messages) and one state
snapshot, so `think --dry-run` shows byte for byte what a round would send.
The whole request keeps within `prompt.max_chars`: each message is cut to
`prompt.message_chars`, and the oldest history goes first, never the persona
prompt nor the instruction prompt; a round that offers tools leaves a share
of the budget to the tool loop's steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from backthink.config import Settings
from backthink.memory.block import MemoryBlock, render_memory_block
from backthink.models import MemoryRef, Message, StateReading, Trigger
from backthink.ports import StateProvider
from backthink.records import ModelMessage
from backthink.round.context import conversation
from backthink.round.prompts import PromptBook, owner_display_name, render_prompt
from backthink.round.text_budget import cut_text, fit_history
from backthink.tools.offer import offers_tools


@dataclass(frozen=True)
class Request:
    """The exact messages of one model round and what was learned building them."""

    messages: list[ModelMessage]
    state: StateReading
    recent: list[Message] = field(default_factory=list)
    """The history as the model sees it: the messages kept, each cut to its budget."""
    notes: list[str] = field(default_factory=list)

    trigger: str = ""
    memory: MemoryBlock = field(default_factory=MemoryBlock)
    """The thoughts and recalled items read for the round."""
    recalled: list[MemoryRef] = field(default_factory=list)
    """Which of them the instruction prompt shows, within its budget."""
    window: list[Message] = field(default_factory=list)
    """The history as it was read, before any cut: what recall is queried by."""

    @property
    def prompt(self) -> str:
        """The instruction prompt: the request's last message."""
        return self.messages[-1].text

    def untrusted(self) -> list[str]:
        """Every outside text the request carries, for the echo guard.

        Every message of the window but the companion's own pushes (the
        owner's, and assistant messages a chat app handed in, `messages add`
        stored or the relay kept from its upstream: a record of what was said
        in a chat, never the companion's word), a poke's trigger text, every
        string of the state file (the keys of the device facts as well as
        their values) and the memory block's texts (a memory may be anyone's
        words, a thought is private): a reply whose body or footer is taken
        from any of them is an echo, never the companion's own decision.
        """
        texts = [m.text for m in self.recent if not own_push(m)]
        texts.extend(self.memory.texts())
        if Trigger.of(self.trigger) is Trigger.POKE:
            texts.append(self.trigger)
        state = self.state.state
        if state is not None:
            texts.extend(state.notes)
            texts.extend(item.title for item in state.schedule)
            texts.extend(strings_of(state.device))
        return texts


def own_push(message: Message) -> bool:
    """Whether a window message is the companion's own word: a push it made and did not fail.

    Only the dispatcher writes `origin` "proactive" (no import or API field
    sets it); an undelivered push is never shown to the model anyway.
    """
    return message.role == "assistant" and message.origin == "proactive" and not message.undelivered


STATE_DEPTH = 32  # levels of nested objects read for their strings; deeper ones are shown whole


def strings_of(value: Any, depth: int = STATE_DEPTH) -> list[str]:
    """Every string in a JSON value, object keys included, numbers and the like as text.

    A device fact is shown as `key=value`, a nested value written out whole:
    a key, at any depth, is as much the model's input as a value.
    """
    if isinstance(value, dict):
        found: list[str] = []
        for key, item in value.items():
            found.append(str(key))
            found.extend(strings_of(item, depth - 1) if depth > 0 else [str(item)])
        return found
    if isinstance(value, list | tuple):
        found = []
        for item in value:
            found.extend(strings_of(item, depth - 1) if depth > 0 else [str(item)])
        return found
    return [value if isinstance(value, str) else str(value)]


# The persona prompt may take this share of prompt.max_chars; the rest is left to the
# history and the instruction prompt, so a runaway persona file cannot crowd them out.
PERSONA_SHARE = 4  # one quarter
# A round that offers tools keeps this share of prompt.max_chars free of history (at
# most what its calls may answer): the tool loop's steps must fit the same budget.
TOOL_SHARE = 4  # one quarter


def tool_room(settings: Settings) -> int:
    """Characters of `prompt.max_chars` the history leaves to the tool loop's steps."""
    if not offers_tools(settings):
        return 0
    t = settings.tools
    return min(settings.prompt.max_chars // TOOL_SHARE, t.max_calls * t.max_result_chars)


class RequestBuilder:
    """Assembles requests for one persona and one set of templates."""

    def __init__(
        self, settings: Settings, *, prompts: PromptBook, persona_prompt: str, state: StateProvider
    ) -> None:
        self._settings = settings
        self._prompts = prompts
        persona = persona_prompt.strip()
        limit = settings.prompt.max_chars // PERSONA_SHARE
        self._persona_prompt, cut = cut_text(persona, limit, settings.prompt.language)
        self._persona_note = (
            f"persona_prompt_cut: kept {limit} of {len(persona)} characters" if cut else None
        )
        self._state = state

    def build(
        self,
        recent: Sequence[Message],
        trigger: str,
        at: datetime,
        *,
        memory: MemoryBlock | None = None,
    ) -> Request:
        """Take the state snapshot once and assemble the request around `recent`.

        `memory` (the journal and the recalled items) goes into the instruction
        prompt after its template, next to the state block.
        """
        memory = memory if memory is not None else MemoryBlock()
        reading = self._state.read(at)
        notes = [] if reading.problem is None or reading.problem.expected else [reading.note or ""]
        s = self._settings
        shown = render_memory_block(
            memory,
            tz=s.owner.tz,
            language=s.prompt.language,
            max_chars=s.memory.max_chars,
            recall=s.memory.recall,
        )
        prompt = render_prompt(
            self._prompts,
            trigger=trigger,
            at=at,
            tz=s.owner.tz,
            state=reading.state,
            channels=list(s.channels),
            persona_name=s.persona.name or s.persona.id,
            owner_name=owner_display_name(s.owner.name, s.prompt.language),
            memory=shown.text,
            output=s.model.output,
        )
        notes.extend(memory.notes)
        if self._persona_note is not None:
            notes.append(self._persona_note)
        fixed = len(self._persona_prompt) + len(prompt)
        if fixed > s.prompt.max_chars:
            notes.append(
                f"request_over_budget: the persona and instruction prompts alone take {fixed} "
                f"of prompt.max_chars = {s.prompt.max_chars} characters"
            )
        history = fit_history(
            recent,
            budget=s.prompt.max_chars - fixed - tool_room(s),
            message_chars=s.prompt.message_chars,
            language=s.prompt.language,
            render=lambda kept: conversation(
                kept,
                persona_id=s.persona.id,
                names={s.persona.id: s.persona.name},
                language=s.prompt.language,
                tz=s.owner.tz,
            ),
        )
        if history.note is not None:
            notes.append(history.note)
        messages: list[ModelMessage] = []
        if self._persona_prompt:
            messages.append(ModelMessage(role="system", text=self._persona_prompt))
        messages.extend(history.messages)
        messages.append(ModelMessage(role="user", text=prompt))
        return Request(
            messages=messages,
            state=reading,
            recent=history.kept,
            notes=notes,
            trigger=trigger,
            memory=memory,
            recalled=shown.shown,
            window=list(recent),
        )
