"""Reading an upstream's chat completion on its way through the relay, without changing it.

The relay passes the upstream's bytes on as they come; beside them it reads
just enough to keep the reply (its text, once complete) and its token counts.
Nothing here is ever logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Response headers a client may rely on; hop-by-hop and length headers are the relay's own.
PASSED_HEADERS = (
    "content-type",
    "x-request-id",
    "openai-model",
    "openai-organization",
    "openai-processing-ms",
    "openai-version",
    "retry-after",
    "retry-after-ms",
)
PASSED_PREFIXES = ("x-ratelimit-",)
LINE_MAX_BYTES = 4 * 1024 * 1024  # one SSE line longer than this is not read (still passed on)
MAX_TOOL_NAMES = 8  # tool names a stream's reader keeps, the first ones


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream response headers the relay hands on to its client."""
    return {
        name: value
        for name, value in ((k.lower(), v) for k, v in headers.items())
        if name in PASSED_HEADERS or name.startswith(PASSED_PREFIXES)
    }


@dataclass
class Completion:
    """What the relay keeps of a completion: the reply's text, whether it ended, the tokens."""

    text: str = ""
    complete: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def read_usage(self, usage: Any) -> None:
        """Take the token counts of a `usage` object, when it has them."""
        if isinstance(usage, Mapping):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            if isinstance(completion, int):
                self.completion_tokens = completion


def _json(raw: bytes) -> Any:
    """`raw` as JSON, or None when it is not (malformed, or nested past the parser's depth)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def read_completion(body: bytes) -> Completion:
    """The reply of a non-streamed completion (empty and incomplete when it has none)."""
    found = Completion()
    data = _json(body)
    if not isinstance(data, Mapping):
        return found
    found.read_usage(data.get("usage"))
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        found.text = content
        found.complete = True
    return found


class StreamReader:
    """Follows a streamed completion's SSE chunks: the first choice's text, its end, usage."""

    def __init__(self) -> None:
        """Start before the first chunk."""
        self.completion = Completion()
        # The pieces of the line under way: joined once its end arrives, so a long
        # line in many small pieces costs its length, not its length squared.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._parts: list[str] = []
        self._broken = False
        self.chars = 0
        """Characters of the reply's text so far."""
        self.tools: list[str] = []
        """Names of the tools the reply calls so far (the first MAX_TOOL_NAMES)."""

    def feed(self, chunk: bytes) -> None:
        """Read one piece of the byte stream (pieces may split lines anywhere)."""
        if self._broken:
            return
        *ends, rest = chunk.split(b"\n")
        for end in ends:
            self._pending.append(end)
            line = b"".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            self._line(line.rstrip(b"\r"))
        if rest:
            self._pending.append(rest)
            self._pending_bytes += len(rest)
        if self._pending_bytes > LINE_MAX_BYTES:
            # A line this long is no chat chunk; the reply will not be kept.
            self._broken = True
            self._pending.clear()

    def _line(self, line: bytes) -> None:
        """Read one SSE line: a `data:` chunk's text, finish and usage; `[DONE]`."""
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.completion.complete = True
            return
        data = _json(payload)
        if not isinstance(data, Mapping):
            return
        self.completion.read_usage(data.get("usage"))
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, Mapping) else None
            if isinstance(content, str):
                self._parts.append(content)
                self.chars += len(content)
            calls = delta.get("tool_calls") if isinstance(delta, Mapping) else None
            for call in calls if isinstance(calls, list) else ():
                function = call.get("function") if isinstance(call, Mapping) else None
                name = function.get("name") if isinstance(function, Mapping) else None
                if isinstance(name, str) and name and len(self.tools) < MAX_TOOL_NAMES:
                    self.tools.append(name)
            if choice.get("finish_reason"):
                self.completion.complete = True

    def finish(self) -> Completion:
        """The completion as read once the stream ended (incomplete if it broke off)."""
        if self._pending and not self._broken:
            self._line(b"".join(self._pending).rstrip(b"\r"))
            self._pending.clear()
        self.completion.text = "".join(self._parts)
        if self._broken:
            self.completion.complete = False
        return self.completion
