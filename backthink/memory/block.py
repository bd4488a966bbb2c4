"""The memory block of a request: the companion's recent thoughts and what the window recalls.

Both parts are untrusted text (a thought was written by a model that read
outside text; a memory or an old message may be anyone's words), so each
item is one folded line, without footer tags or attribution markers, cut to
its share of `memory.max_chars`. The block sits in the instruction prompt
after its template and before the per-round lines (trigger, time, state), so
the cache-stable prefix of the request ends no earlier than it must.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from backthink.decision.inert import inert
from backthink.decision.tags import has_tags
from backthink.models import Language, Memory, MemoryKind, MemoryRef, Recalled

MIN_THOUGHT_CHARS = 60
"""A journal line keeps at least this many characters of its thought, however tight the budget."""

_LABELS: dict[Language, dict[str, str]] = {
    "zh": {
        "journal": "[你之前的想法]",
        "recalled": "[想起的旧事]",
        "thought": "- {when} {text}",
        "quoting": "- {when} （引述了外来的文字）{text}",
        "item": "- {when} {who}：{text}",
        "user": "主人说",
        "assistant": "你说",
        "proactive": "你主动发过",
        "system": "系统消息",
        "note": "笔记",
        "profile": "关于主人",
        "old_thought": "你的旧想法",
    },
    "en": {
        "journal": "[Your earlier thoughts]",
        "recalled": "[Recalled]",
        "thought": "- {when} {text}",
        "quoting": "- {when} (quoting outside text) {text}",
        "item": "- {when} {who}: {text}",
        "user": "the owner said",
        "assistant": "you said",
        "proactive": "you wrote unprompted",
        "system": "system message",
        "note": "note",
        "profile": "about the owner",
        "old_thought": "your earlier thought",
    },
}


@dataclass(frozen=True)
class MemoryBlock:
    """What a round remembers: its latest thoughts (oldest first) and the recalled items."""

    thoughts: Sequence[Memory] = ()
    recalled: Sequence[Recalled] = ()
    notes: list[str] = field(default_factory=list)

    def texts(self) -> list[str]:
        """The texts of the block that are outside text, for the echo guard.

        The companion's own words (its thoughts, its old pushes) are not:
        following up on an earlier thought in its words is what the journal is
        for. Unless a thought quotes outside text (it was kept `untrusted`): an
        echo of it is an echo of what it quotes. Or unless they carry footer
        tags, which no thought it kept can (they are removed when it is kept):
        such a row was written by someone else. An assistant message of a chat
        is outside text too: a chat app or the relay's upstream wrote it.
        """
        texts = [m.text for m in self.thoughts if m.untrusted or has_tags(m.text)]
        for item in self.recalled:
            own = not item.untrusted and (
                item.memory_kind is MemoryKind.THOUGHT
                or (
                    item.kind == "message"
                    and (item.role or "").strip().lower() == "assistant"
                    and item.origin == "proactive"
                )
            )
            if not own or has_tags(item.text):
                texts.append(item.text)
        return texts

    def __bool__(self) -> bool:
        return bool(self.thoughts or self.recalled)


JOURNAL_SHARE = 3
"""The journal takes a third of `memory.max_chars` (all of it without recall), recall the rest.

The journal changes whenever a round keeps a thought, so it is the part of
the request a prompt cache misses most; a small share keeps the cache-stable
prefix long.
"""


def journal_share(max_chars: int, *, recall: int) -> int:
    """The characters the journal may take of `max_chars`."""
    return max_chars if recall <= 0 else max_chars // JOURNAL_SHARE


@dataclass(frozen=True)
class RenderedMemory:
    """The memory block as the prompt shows it, and which rows it shows (journal first)."""

    text: str = ""
    shown: list[MemoryRef] = field(default_factory=list)


def render_memory_block(
    block: MemoryBlock, *, tz: ZoneInfo, language: Language, max_chars: int, recall: int
) -> RenderedMemory:
    """Render the recalled items, then the journal; empty when there is nothing to show.

    Recall comes first: it changes only when the window moves, the journal
    whenever a round keeps a thought. The journal lines take at most
    `journal_share` of `max_chars`, each thought an equal part of it; the
    recalled texts were already bounded by the recall and are cut again here
    to the budget left.
    """
    labels = _LABELS[language]
    share = journal_share(max_chars, recall=recall) if block.thoughts else 0
    journal: list[str] = []
    thoughts: list[MemoryRef] = []
    used = 0
    if block.thoughts:
        each = max(share // len(block.thoughts), MIN_THOUGHT_CHARS)
        for thought in reversed(block.thoughts):  # newest first while the budget lasts
            text = inert(thought.text, each, keep_end=True)
            if not text or used + len(text) > share:
                continue
            used += len(text)
            when = thought.created_at.astimezone(tz).strftime("%m-%d %H:%M")
            # A thought that quotes outside text says so: the quote is not the companion's.
            line = labels["quoting" if thought.untrusted else "thought"]
            journal.append(line.format(when=when, text=text))
            if thought.id is not None:
                thoughts.append(MemoryRef(kind="thought", id=thought.id))
        journal.reverse()
        thoughts.reverse()
    items: list[str] = []
    recalled: list[MemoryRef] = []
    for item in block.recalled:
        text = inert(item.text, max_chars - used)
        if not text:
            continue
        used += len(text)
        when = item.created_at.astimezone(tz).strftime("%Y-%m-%d")
        items.append(labels["item"].format(when=when, who=labels[_who(item)], text=text))
        recalled.append(MemoryRef(kind=item.kind, id=item.id))
    lines: list[str] = []
    if items:
        lines += [labels["recalled"], *items]
    if journal:
        lines += [labels["journal"], *journal]
    return RenderedMemory("\n".join(lines), [*thoughts, *recalled])


def _who(item: Recalled) -> str:
    if item.kind == "memory":
        return {
            MemoryKind.NOTE: "note",
            MemoryKind.PROFILE: "profile",
            MemoryKind.THOUGHT: "old_thought",
        }.get(item.memory_kind or MemoryKind.NOTE, "note")
    role = (item.role or "user").strip().lower()
    if role == "assistant":
        return "proactive" if item.origin == "proactive" else "assistant"
    return "system" if role == "system" else "user"
