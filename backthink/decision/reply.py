"""A model reply read once: its private thought, its footer, its body and its decision.

Every reader of a reply (the round, the journal, the evaluation, the page)
reads the one `Reply` value `read_reply` makes, in the configured output
mode: the footer protocol, or one JSON object (`model.output =
"json_schema"`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backthink.decision.failsafe import UNCLOSED_THINK
from backthink.decision.footer import find_footer, footer_decision, without_fences
from backthink.decision.reasoning import fold_thought, split_thinking
from backthink.decision.structured import Output, object_decision, read_object
from backthink.decision.tags import without_tags
from backthink.models import Decision


@dataclass(frozen=True)
class Reply:
    """What a reply says, each part once.

    `thought` is the private thinking as written: reasoning blocks, then the
    text before the footer (or a JSON reply's `thought`). `thinking`,
    `footer` and `body` are the reply cut where the parser cuts it, for
    showing it as the model wrote it.
    """

    decision: Decision
    thought: str
    thinking: str
    footer: str
    body: str

    def journal_thought(self, max_chars: int) -> str:
        """The thought as the journal keeps it: no footer tags, whitespace folded, the start cut.

        A thought ends with what it concluded, so past `max_chars` the beginning goes.
        """
        return fold_thought(without_tags(self.thought), max_chars=max_chars)


def read_reply(text: str, *, output: Output, max_body_chars: int) -> Reply:
    """Read a raw reply in the configured output mode; anything unclear is no push."""
    split = split_thinking(text)
    reasoning = [block.strip() for block in split.thinking if block.strip()]
    if output == "json_schema":
        data, problems = read_object(split)
        decision = object_decision(data, problems, max_body_chars=max_body_chars)
        if data is None:
            thinking = "\n\n".join([*reasoning, split.visible.strip()]).strip()
            return Reply(decision, " ".join(split.thinking), thinking, "", "")
        fields = ("decision", "channel", "urgency")
        return Reply(
            decision,
            " ".join([*split.thinking, data["thought"]]),
            "\n\n".join(p for p in [*reasoning, data["thought"].strip()] if p),
            "\n".join(f"{key}: {data[key]}" for key in fields),
            data["body"].strip(),
        )
    lines = without_fences(split.visible)
    footer = find_footer(lines)
    problems = [UNCLOSED_THINK] if split.unclosed else []
    decision = footer_decision(lines, footer, problems, max_body_chars=max_body_chars)
    if footer is None:
        thought = " ".join([*split.thinking, *lines])
        thinking = "\n\n".join([*reasoning, "\n".join(lines).strip()]).strip()
        return Reply(decision, thought, thinking, "", "")
    before = lines[: footer.start]
    shown = "\n".join(before).strip()
    return Reply(
        decision,
        " ".join([*split.thinking, *before]),
        "\n\n".join(p for p in [*reasoning, shown] if p),
        "\n".join(line for line in lines[footer.start : footer.end + 1] if line.strip()),
        "\n".join(lines[footer.end + 1 :]).strip(),
    )
