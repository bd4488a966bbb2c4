"""A settings validation error in plain words: the key as the file writes it, and a hint.

pydantic names a key by its path through the models, with the tag of a
channel's type in the middle (`channels.x.webhook.url`) and its own wording
("Input tag 'pigeon' found using 'type' does not match any of the expected
tags"). A user wrote `[channels.x]` and `url`; the error should say that, and
when a section or key is unknown, which known one it was probably meant to be.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

# How close a known name must be to an unknown one to be offered as a hint (0..1).
HINT_CUTOFF = 0.6


def describe(exc: ValidationError, root: type[BaseModel]) -> tuple[tuple[str, ...], str]:
    """The first error of `exc` as (its key path in lower case, `key.path: what is wrong`)."""
    err = exc.errors(include_url=False)[0]
    parts, known = _walk(root, [str(p) for p in err["loc"] if not str(p).endswith("Settings")])
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        parts.append(str((err.get("ctx") or {}).get("discriminator", "type")).strip("'"))
    key = ".".join(parts)
    message = _message(err, parts, known)
    return tuple(p.lower() for p in parts), (f"{key}: {message}" if key else message)


def _message(err: ErrorDetails, parts: Sequence[str], known: Sequence[str]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        what = "unknown section" if len(parts) == 1 else "unknown key"
        return what + _hint(parts[-1] if parts else "", known)
    if kind == "union_tag_invalid":
        ctx = err.get("ctx") or {}
        tag = ctx.get("tag", "")
        expected = str(ctx.get("expected_tags", "")).replace("'", "")
        return f"{tag!r} is not one of the types {expected}"
    if kind == "union_tag_not_found":
        return "is missing"
    return str(err["msg"]).removeprefix("Value error, ")


def _hint(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=HINT_CUTOFF)
    return f" (did you mean {close[0]}?)" if close else ""


def _walk(root: type[BaseModel], loc: list[str]) -> tuple[list[str], list[str]]:
    """The key path as written in the file, and the names known where it ends.

    A discriminated union's tag, which pydantic puts into the location, is left
    out; the names known are the fields of the model the last part belongs to.
    """
    model: type[BaseModel] | None = root
    out: list[str] = []
    known: list[str] = list(root.model_fields)
    i = 0
    while i < len(loc):
        part = loc[i]
        out.append(part)
        i += 1
        if model is None:
            continue
        known = list(model.model_fields)
        field = model.model_fields.get(part)
        if field is None:
            model = None
            continue
        annotation: Any = field.annotation
        if get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
            if i < len(loc):
                out.append(loc[i])
                i += 1
        members = _union_members(annotation)
        if members and i < len(loc):
            chosen = next((m for m in members if loc[i] in _tags(m)), None)
            if chosen is not None:
                i += 1  # the tag is pydantic's, not a key of the file
            model = chosen
            continue
        is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation if is_model else None
    return out, known


def _union_members(annotation: Any) -> list[type[BaseModel]]:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) not in (Union, types.UnionType):
        return []
    return [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]


def _tags(model: type[BaseModel]) -> tuple[Any, ...]:
    field = model.model_fields.get("type")
    return get_args(field.annotation) if field is not None else ()
