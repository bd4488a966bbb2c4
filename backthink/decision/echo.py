"""The echo guards: a push whose words were taken from outside text is refused.

The footer parser reads what the model decided; these checks then ask where
the body came from. A body copied, exactly or nearly, from the owner's words,
an assistant message the companion did not deliver itself (a chat app's, the
relay's upstream's), the state file or a poke's trigger, or from the
instruction prompt itself, is never the companion's own message, and footer
tags typed into outside text never become its decision or urgency.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from backthink.decision.failsafe import ECHOED_FOOTER, ECHOED_PROMPT
from backthink.decision.overlap import (
    containment,
    joined_lines,
    letter_count,
    normalize,
    resemblance,
    shingles,
)
from backthink.decision.tags import has_tags, without_tags
from backthink.models import Decision

_DIGITS = re.compile(r"\d+")

# The echo guard's thresholds, as shares of shingles (see backthink.decision.overlap).
ECHO_COPY_SHARE: Final = 0.7  # of the body found in one untrusted text: a copy
ECHO_COPY_MIN_SHINGLES: Final = 3  # a shorter body may repeat a word or two by chance
ECHO_NEAR_COPY: Final = 0.8  # resemblance of the whole body to the whole text
ECHO_NEAR_COPY_MIN_LETTERS: Final = 4  # "晚安" answered with "晚安" is no copy worth the name
ECHO_TAGGED_SHARE: Final = 0.3  # of either side, when the untrusted text carries footer tags
ECHO_TAGGED_RESEMBLANCE: Final = 0.5  # of the whole body to a tagged text's words


def reject_echo(decision: Decision, untrusted_texts: Iterable[str]) -> Decision:
    """Refuse a push whose body was taken, exactly or nearly, from untrusted text.

    Untrusted text is everything the model was shown that the companion did not
    write: the owner's messages, assistant messages that came from outside (a
    chat app's, `messages add`, the relay's upstream: only its own delivered
    pushes are the companion's word), the state file, memories and tool
    output. Its words must never become the companion's message, and footer tags
    typed into it must never become the companion's decision or urgency. Bodies
    are compared after folding width, case, spacing and punctuation, as shingle
    containment, so a copy with a character changed, a greeting added or words
    wrapped around it is still recognised. Two rules, per untrusted text:

    - a copy: most of the body (`ECHO_COPY_SHARE`) comes from the text, or
      the whole body nearly equals the whole text (`ECHO_NEAR_COPY`);
    - a tagged text (one holding footer tags, English or Chinese, full- or
      half-width, even with invisible characters inside, written as HTML
      entities, with look-alike brackets or letters, or split over lines):
      the reply is refused
      once a real part (`ECHO_TAGGED_SHARE`) of the text's words appears in the
      body, or of the body's words in the text, or the two are half alike
      (`ECHO_TAGGED_RESEMBLANCE`, for short texts). Such a text is an attempt to
      script the reply, so a lower bar applies; its tags themselves are not
      compared, because an honest reply carries the same tags.

    A reply in the companion's own words is kept whatever tags the texts hold.

    Args:
        decision: a parsed decision.
        untrusted_texts: every untrusted text the model was shown, read once.

    Returns:
        The decision unchanged, or a no-push decision with problem `echoed_footer`.
    """
    if not decision.push:
        return decision
    said = without_tags(normalize(decision.body))
    body = shingles(said)
    for text in untrusted_texts:
        text = normalize(text)
        content = without_tags(text)
        words = shingles(content)
        if not body & words:
            continue
        of_body = containment(body, words)
        alike = resemblance(said, content)
        copied = (len(body) >= ECHO_COPY_MIN_SHINGLES and of_body >= ECHO_COPY_SHARE) or (
            letter_count(said) >= ECHO_NEAR_COPY_MIN_LETTERS and alike >= ECHO_NEAR_COPY
        )
        tagged = (has_tags(text) or has_tags(joined_lines(text))) and (
            max(of_body, containment(words, body)) >= ECHO_TAGGED_SHARE
            or alike >= ECHO_TAGGED_RESEMBLANCE
        )
        if copied or tagged:
            return Decision(problems=[*decision.problems, ECHOED_FOOTER])
    return decision


PROMPT_ECHO_MIN_CHARS: Final = 6  # characters; shorter prompt lines may be said naturally


def reject_prompt_echo(decision: Decision, prompt: str) -> Decision:
    """Refuse a push whose body repeats a line of the instruction prompt.

    A weak model sometimes continues with the prompt's own lines ("触发：定时心跳",
    "The owner's local time is now ...") after its footer; those must never
    reach the owner as if the companion had said them. Digits are compared as
    one placeholder, so a copied line whose time or date the model rewrote
    ("... now 2026-11-30 17:54 ...") is still recognised.

    Args:
        decision: a parsed decision.
        prompt: the instruction prompt the model was given.

    Returns:
        The decision unchanged, or a no-push decision with problem `echoed_prompt`.
    """
    if not decision.push:
        return decision
    body = _DIGITS.sub("0", decision.body)
    for line in prompt.splitlines():
        line = line.strip()
        if len(line) >= PROMPT_ECHO_MIN_CHARS and _DIGITS.sub("0", line) in body:
            return Decision(problems=[*decision.problems, ECHOED_PROMPT])
    return decision
