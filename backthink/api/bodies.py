"""What a request carries, read with bounds: its JSON body, whole numbers in its query or headers.

A body is JSON only when it says so (`Content-Type: application/json`): a
web page may send another site a plain-text POST without asking first, never
a JSON one, so this one rule keeps other sites' pages from writing into the
session or spending the relay's upstream key. Every body is bounded by
`api.max_body_bytes`, and JSON nested deeper than Python's parser goes is a
400 like any other malformed body.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from backthink.api.refusals import Refusal

JSON_TYPE = "application/json"
NUMBER_DIGITS = 18  # digits of a whole number read at most: every id and count fits in 64 bits


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


async def read_json(request: Request, limit: int) -> Any:
    """The request's body as JSON: it must say `Content-Type: application/json` and fit `limit`.

    Raises:
        Refusal: 415 for another content type, 413 past `limit`, 400 for a
            body that is not UTF-8 JSON (saying where it breaks).
    """
    require_json(request)
    return parse_json(await read_body(request, limit))


def require_json(request: Request) -> None:
    """Refuse (415) a body that does not say `Content-Type: application/json`.

    Raises:
        Refusal: another content type, or none.
    """
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != JSON_TYPE:
        shown = f"got {kind[:60]!r}" if kind else "none given"
        raise Refusal(415, f"content-type: send Content-Type: {JSON_TYPE} ({shown})")


def parse_json(raw: bytes) -> Any:
    """`raw` as JSON.

    Raises:
        Refusal: it is not UTF-8 JSON, or nests deeper than the parser goes (400).
    """
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise Refusal(400, "body: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Refusal(
            400, f"body: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise Refusal(400, "body: JSON nested too deeply") from None
