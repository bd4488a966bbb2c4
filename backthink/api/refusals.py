"""How the doors say no: a refusal carries a status and one line naming the field or rule.

The API answers `{"error": "..."}`; the relay answers as an OpenAI-compatible
server does, `{"error": {"message", "type", "code"}}`, so a chat front-end
shows its own error text. Both name a field the same way: `body[2].at`,
`messages[3].text`, `limit`.
"""

from __future__ import annotations

from typing import Any, Literal

from starlette.responses import JSONResponse, Response

Style = Literal["api", "openai"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
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


def error_body(status: int, message: str, style: Style) -> dict[str, Any]:
    """`{"error": message}`, or the OpenAI-style error object the relay answers with."""
    if style == "api":
        return {"error": message}
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": status}}


def error_response(
    status: int, message: str, style: Style, *, headers: dict[str, str] | None = None
) -> Response:
    """An error body (see `error_body`) as a JSON response with `status`."""
    return JSONResponse(error_body(status, message, style), status_code=status, headers=headers)
