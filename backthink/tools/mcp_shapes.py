"""What crosses from an MCP server into a round: tool names, schemas, descriptions, results.

Names, descriptions and results come from outside programs: they are cut
short, made safe for chat-completions, and never read as instructions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from mcp import types as mcp_types

MAX_NAME_CHARS = 64
"""Chat-completions function names are at most this long."""
HASH_CHARS = 8
"""Hex digits of the suffix that keeps a cut or colliding name unique."""
MAX_DESCRIPTION_CHARS = 300
MAX_NOTE_CHARS = 160
MAX_ERROR_CHARS = 300
MAX_LIST_PAGES = 20
MAX_TOOLS_PER_SERVER = 32
"""Tools offered of one server at most: each costs prompt tokens on every round (use `allow`)."""
MAX_SCHEMA_CHARS = 4_000
"""A tool whose input schema is longer than this (as JSON) is not offered."""
"""A server that pages its tool list further than this is cut off there."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Keywords whose value is one schema, a list of schemas, or a name -> schema map; every
# other keyword (default, enum, const, examples, ...) holds data, copied as it is.
_SCHEMA_KEYS = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains",
     "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"}
)  # fmt: skip
_SCHEMA_LIST_KEYS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_MAP_KEYS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def offered_name(server: str, tool: str, taken: set[str]) -> str:
    """The name a tool is offered under: `server__tool`, safe for chat-completions.

    Characters outside [A-Za-z0-9_-] become `_`. A name longer than 64 characters,
    or one already in `taken`, is cut and ends in a hash of the server and the
    original name, so two different tools never share a name.
    """
    name = f"{server}__{_UNSAFE.sub('_', tool)}"
    salt = 0
    while len(name) > MAX_NAME_CHARS or name in taken:
        digest = hashlib.sha1(f"{server}\0{tool}\0{salt}".encode()).hexdigest()[:HASH_CHARS]
        base = f"{server}__{_UNSAFE.sub('_', tool)}"
        name = f"{base[: MAX_NAME_CHARS - HASH_CHARS - 1]}_{digest}"
        salt += 1
    return name


def clean_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool's input schema without `title` keys, objects always with `properties`."""
    if not isinstance(schema, Mapping):
        return {"type": "object", "properties": {}}
    cleaned = _clean(schema)
    cleaned.setdefault("type", "object")
    if cleaned["type"] == "object":
        cleaned.setdefault("properties", {})
    return cleaned


def _clean(schema: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_KEYS and isinstance(value, Mapping):
            out[key] = _clean(value)
        elif key in _SCHEMA_LIST_KEYS and isinstance(value, list):
            out[key] = [_clean(item) if isinstance(item, Mapping) else item for item in value]
        elif key in _SCHEMA_MAP_KEYS and isinstance(value, Mapping):
            # Here the keys are property names: a property called "title" stays.
            out[key] = {
                sub: _clean(item) if isinstance(item, Mapping) else item
                for sub, item in value.items()
            }
        else:
            out[key] = value
    if out.get("type") == "object":
        out.setdefault("properties", {})
    return out


def description(tool: mcp_types.Tool, server: str) -> str:
    text = " ".join((tool.description or "").split())
    return short(text, MAX_DESCRIPTION_CHARS) or f"{tool.name} from {server}"


def render_result(result: mcp_types.CallToolResult) -> str:
    """A call's result as text: its text blocks, else its structured content as JSON.

    Blocks that are not text (images, audio, links, binary resources) become
    one-line placeholders in their place.
    """
    parts: list[str] = []
    has_text = False
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
            has_text = True
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            parts.append(block.resource.text)
            has_text = True
        else:
            parts.append(_placeholder(block))
    if not has_text and result.structured_content is not None:
        structured = json.dumps(
            result.structured_content, ensure_ascii=False, separators=(",", ":"), default=str
        )
        parts.insert(0, structured)
    return "\n".join(parts)


def _placeholder(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return f"[{block.type} {short(block.mime_type, 40)}]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link {short(block.name, 80)}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        return f"[resource {short(block.resource.mime_type or 'binary', 40)}]"
    return f"[{short(str(getattr(block, 'type', 'content')), 40)}]"


def short(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
