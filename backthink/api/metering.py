"""Metering streamed turns: the relay asks the upstream for usage, and hands on only what was asked.

An OpenAI-compatible server reports the tokens of a streamed completion only
when asked (`stream_options: {"include_usage": true}`), in one chunk of its
own after the last choice: `{"choices": [], "usage": {...}}`. Most chat
front-ends never ask, so the relay asks for them (`ask_usage`) and takes
that chunk out of what their client gets (`UsageFilter`), reading it on the
way. A client that asked gets the stream as it came.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

USAGE_ONLY = (b'"choices":[]', b'"choices": []')
"""How a usage-only chunk's line shows itself, before it is parsed."""


def ask_usage(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The body asking for usage, when it streams without asking; None when it needs no change."""
    if body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping) or options.get("include_usage") is True:
        # The client asked (or sent something the upstream should judge): left as it is.
        return None
    return {**body, "stream_options": {**options, "include_usage": True}}


def usage_only(line: bytes) -> bool:
    """Whether an SSE line is a `data:` chunk holding usage and no choice."""
    if not line.startswith(b"data:") or not any(mark in line for mark in USAGE_ONLY):
        return False
    try:
        data = json.loads(line[5:])
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(data, Mapping)
        and data.get("choices") == []
        and isinstance(data.get("usage"), Mapping)
    )


class UsageFilter:
    """Passes a stream's lines on as they complete, less the usage-only chunk.

    Only a line not yet ended is held back; the blank line that ends the
    dropped event is dropped with it.
    """

    def __init__(self) -> None:
        """Start before the first piece."""
        self._pending: list[bytes] = []
        self._skip_blank = False

    def feed(self, piece: bytes) -> bytes:
        """What of `piece` (and of the line it ends) goes on to the client now."""
        *ends, rest = piece.split(b"\n")
        out: list[bytes] = []
        for end in ends:
            self._pending.append(end)
            line = b"".join(self._pending)
            self._pending.clear()
            if self._skip_blank and not line.strip():
                self._skip_blank = False
                continue
            self._skip_blank = False
            if usage_only(line.rstrip(b"\r")):
                self._skip_blank = True
                continue
            out.append(line + b"\n")
        if rest:
            self._pending.append(rest)
        return b"".join(out)

    def finish(self) -> bytes:
        """The rest of a stream that ended without a last newline."""
        rest = b"".join(self._pending)
        self._pending.clear()
        return b"" if usage_only(rest.rstrip(b"\r")) else rest
