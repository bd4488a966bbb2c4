"""What a request carries, read with bounds: its JSON body, whole numbers in its query or headers.

A body is JSON only when it says so (`Content-Type: application/json`): a
web page may send another site a plain-text POST without asking first, never
a JSON one, so this one rule keeps other sites' pages from writing into the
session or spending the relay's upstream key. Every body is bounded by
`api.max_body_bytes`.

Bad bytes are a 400 naming the field, never a 500 (nor a value passed on to
the database or the upstream): text that is not UTF-8, a lone surrogate
(`"\\ud800"`, half of a UTF-16 pair, which no database or encoder takes), a
whole number of more than `INT_MAX_DIGITS` digits (Python refuses to read
more), NaN and Infinity (which Python's parser takes by default and JSON does
not have), and nesting deeper than `MAX_DEPTH` levels.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from backthink.api.refusals import Refusal

JSON_TYPE = "application/json"
NUMBER_DIGITS = 18  # digits of a whole number read at most: every id and count fits in 64 bits
INT_MAX_DIGITS = 4300  # digits of a whole number in a body at most: Python's own bound for int()
MAX_DEPTH = 100  # levels of arrays and objects a body may nest; a chat request needs a dozen
NAME_CHARS = 40  # characters of an odd object key shown in a field's name
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE = "holds a lone surrogate (half of a UTF-16 pair), which is no text"


def whole_number(text: str) -> int | None:
    """`text` as a whole number when it is 1 to NUMBER_DIGITS ASCII digits, else None.

    `str.isdigit` also accepts digits `int` refuses (superscripts) and the
    digits of every script; only 0-9 count here.
    """
    if not 0 < len(text) <= NUMBER_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def number_param(
    text: str | None, name: str, *, default: int | None, low: int, high: int | None = None
) -> int | None:
    """A query parameter (or header) read as a whole number in [low, high], or `default` if absent.

    Raises:
        Refusal: 400 naming `name` when it is no whole number or out of range.
    """
    if text is None or text == "":
        return default
    value = whole_number(text)
    if value is None:
        raise Refusal(400, f"{name}: expected a whole number, got {text[:40]!r}")
    if value < low or (high is not None and value > high):
        raise Refusal(400, f"{name}: from {low} to {high}" if high else f"{name}: at least {low}")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading the rest.

    Raises:
        Refusal: the body (or its announced length) is larger than `limit`.
    """
    too_large = Refusal(413, f"the body is larger than {limit} bytes (api.max_body_bytes)")
    announced = whole_number(request.headers.get("content-length", ""))
    if announced is not None and announced > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class JsonBody:
    """A request's JSON body: its bytes as they came, and what they say."""

    raw: bytes
    data: Any


async def read_json_body(request: Request, limit: int, *, root: str = "body") -> JsonBody:
    """The request's body and its JSON: `Content-Type: application/json`, within `limit`.

    Fields are named from `root` (`body[0].text`; the relay names them as a
    chat request's own, `messages[3].content`, with `root` "").

    Raises:
        Refusal: 415 for another content type, 413 past `limit`, 400 for a
            body that is not UTF-8 JSON (saying where it breaks) or carries a
            value no body may (naming its field).
    """
    require_json(request)
    raw = await read_body(request, limit)
    return JsonBody(raw, parse_json(raw, root=root))


async def read_json(request: Request, limit: int) -> Any:
    """The request's body as JSON (see `read_json_body`), its fields named from `body`.

    Raises:
        Refusal: as `read_json_body`.
    """
    return (await read_json_body(request, limit)).data


def require_json(request: Request) -> None:
    """Refuse (415) a body that does not say `Content-Type: application/json`.

    Raises:
        Refusal: another content type, or none.
    """
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != JSON_TYPE:
        shown = f"got {kind[:60]!r}" if kind else "none given"
        raise Refusal(415, f"content-type: send Content-Type: {JSON_TYPE} ({shown})")


def parse_json(raw: bytes, *, root: str = "body") -> Any:
    """`raw` as JSON holding nothing a body may not carry; fields are named from `root`.

    Raises:
        Refusal: 400: it is not UTF-8 JSON, nests deeper than `MAX_DEPTH`,
            or holds a lone surrogate, a whole number past `INT_MAX_DIGITS`
            digits, NaN or Infinity (naming the field).
    """
    whole = root or "body"
    try:
        # Decoded first, strictly: json.loads would take bytes as UTF-16 or 32 as well,
        # and UTF-8-encoded surrogates with them.
        text = raw.decode("utf-8-sig")
        data = json.loads(
            text, parse_int=_whole_number, parse_float=_real_number, parse_constant=_constant
        )
    except UnicodeDecodeError:
        raise Refusal(400, f"{whole}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Refusal(
            400, f"{whole}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise Refusal(400, f"{whole}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        # int() itself refused a number (an interpreter set to read fewer digits than ours).
        raise Refusal(400, f"{whole}: holds a number that cannot be read") from None
    _check(data, root)
    return data


class _Unfit:
    """A value no body may carry, met by the parser: named with its field once the parse is done."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _whole_number(text: str) -> int | _Unfit:
    """A JSON integer, or unfit past `INT_MAX_DIGITS` digits (reading more takes quadratic time)."""
    if len(text) - text.startswith("-") > INT_MAX_DIGITS:
        return _Unfit(f"a whole number of more than {INT_MAX_DIGITS} digits")
    return int(text)


def _real_number(text: str) -> float | _Unfit:
    """A JSON number with a fraction or exponent, or unfit when it reads as infinity (`1e999`)."""
    value = float(text)
    if not math.isfinite(value):
        return _Unfit("a number too large to be read (it would be Infinity)")
    return value


def _constant(name: str) -> _Unfit:
    """NaN, Infinity and -Infinity: Python's parser takes them, JSON has no such numbers."""
    return _Unfit(f"{name} is no JSON number")


_Place = tuple["_Place | None", str | int]
"""Where a value sits: the place of its container and its key there (built only as walked)."""


def _check(data: Any, root: str) -> None:
    """Refuse the first value (in the body's order) no body may carry, naming its field.

    A walk with its own stack: depth is bounded here, not by the interpreter's.

    Raises:
        Refusal: 400 naming the field.
    """
    stack: list[tuple[Any, _Place | None, int]] = [(data, None, 0)]
    while stack:
        value, place, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                raise Refusal(400, f"{_name(place, root)}: {_LONE}")
        elif isinstance(value, _Unfit):
            raise Refusal(400, f"{_name(place, root)}: {value.why}")
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise Refusal(400, f"{root or 'body'}: JSON nested deeper than {MAX_DEPTH} levels")
            items: Iterable[tuple[str | int, Any]]
            if isinstance(value, dict):
                if any(not key.isascii() and _SURROGATE.search(key) for key in value):
                    raise Refusal(400, f"{_name(place, root)}: a key {_LONE}")
                items = value.items()
            else:
                items = enumerate(value)
            # Pushed last first, so the first unfit value in the body's order is the one named.
            stack.extend(reversed([(item, (place, key), depth + 1) for key, item in items]))


def _name(place: _Place | None, root: str) -> str:
    """A field's name as a client reads it: `body[2].at`, `messages[3].content`."""
    keys: list[str | int] = []
    while place is not None:
        place, key = place
        keys.append(key)
    name = root
    for key in reversed(keys):
        if isinstance(key, int):
            name += f"[{key}]"
        elif key.isascii() and key.isidentifier():
            name += f".{key}" if name else key
        else:
            name += f"[{json.dumps(key[:NAME_CHARS])}]"
    return name or "body"


def only_params(query: Mapping[str, str], known: Collection[str]) -> None:
    """Refuse a query parameter the route does not read, as an unknown body key is refused.

    Raises:
        Refusal: 400 naming the first unknown parameter (cut short, shown as text).
    """
    for name in query:
        if name not in known:
            shown = name[:40]
            listed = ", ".join(sorted(known)) or "none"
            raise Refusal(400, f"{shown!r}: unknown query parameter (this route reads {listed})")
