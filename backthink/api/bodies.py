"""What every API route shares: refusals as JSON, bounded bodies, parsed JSON.

The API answers `{"error": "..."}`; the relay answers as an OpenAI-compatible
server does, `{"error": {"message", "type", "code"}}`, so a chat front-end
shows its own error text.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

Style = Literal["api", "openai"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class Refusal(Exception):  # noqa: N818 - a refusal is an answer, not an error of the daemon
    """A request the API answers with an error status and one line saying why."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None):
        """`message` names the field or the rule the request broke."""
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}

    def response(self, style: Style) -> Response:
        """The refusal as a JSON response in the API's or the OpenAI style."""
        return error_response(self.status, self.message, style, headers=self.headers)


def error_response(
    status: int, message: str, style: Style, *, headers: dict[str, str] | None = None
) -> Response:
    """`{"error": message}`, or an OpenAI-style error object for the relay."""
    if style == "api":
        body: dict[str, Any] = {"error": message}
    else:
        kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading the rest.

    Raises:
        Refusal: the body (or its announced length) is larger than `limit`.
    """
    too_large = Refusal(413, f"the body is larger than {limit} bytes (api.max_body_bytes)")
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """The body as JSON.

    Raises:
        Refusal: it is not UTF-8 JSON (400, saying where it breaks).
    """
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise Refusal(400, "body: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Refusal(
            400, f"body: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
