"""The OpenAPI document of the API, served at `/v1/openapi.json` (a test keeps it in step).

The body of `POST /v1/messages` is described from the pydantic model that
validates it, so a field added to the model shows here without a second edit.
"""

from __future__ import annotations

from typing import Any

from backthink.api.incoming import API_ROLES
from backthink.api.session import CLIENT_ID_CHARS
from backthink.store.importing import IMPORT_MAX_CHARS, IMPORT_MAX_IMAGE_CHARS, MessageInput

VERSION = "1.0.0"

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "What was wrong, naming the field."}},
}
_RELAY_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string", "description": "What was wrong, naming the field."},
                "type": {"type": "string"},
                "code": {"type": ["integer", "string"]},
            },
        }
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["id", "role", "text", "at", "origin"],
    "properties": {
        "id": {"type": "integer", "description": "backthink's id; the order of the session."},
        "client_id": {"type": ["string", "null"], "description": "The chat app's own id."},
        "role": {"type": "string", "enum": ["user", "assistant", "system"]},
        "text": {"type": "string"},
        "image": {"type": ["string", "null"], "description": "An image URL or data URI."},
        "at": {"type": "string", "format": "date-time", "description": "ISO 8601, UTC."},
        "channel": {"type": ["string", "null"], "description": "null: the session itself."},
        "speaker": {"type": ["string", "null"], "description": "The persona that said it."},
        "origin": {"type": "string", "enum": ["chat", "proactive"]},
        "delivery": {
            "type": ["string", "null"],
            "enum": [None, "delivered", "undelivered", "pending"],
            "description": "null for a chat message; a push's delivery state.",
        },
        "superseded": {
            "type": "boolean",
            "description": "Only with all=1, on a turn an edit in a chat app left behind.",
        },
    },
}
_NEW_MESSAGE_RULES: dict[str, dict[str, Any]] = {
    "role": {"enum": list(API_ROLES)},
    "text": {"maxLength": IMPORT_MAX_CHARS},
    "image": {"maxLength": IMPORT_MAX_IMAGE_CHARS, "description": "An image URL or data URI."},
    "at": {
        "description": "Default now; without an offset, the owner's local time; a time "
        "a little ahead is taken as now, more than 5 minutes ahead is a 400.",
    },
}
"""What the validators of `MessageInput` and the doors check beyond the fields' types, in the
constants they check it with."""


def _new_message() -> dict[str, Any]:
    """NewMessage: the fields of `MessageInput`, the model that validates each message of a POST.

    pydantic describes the fields, their types and which are required; the
    bounds its validators keep and the doors' own rules (the roles, the chat
    app's `id`) are added from the constants those checks use.
    """
    derived = MessageInput.model_json_schema()
    properties: dict[str, Any] = {
        "id": {
            "type": ["string", "integer"],
            "maxLength": CLIENT_ID_CHARS,
            "description": "The chat app's own id (an integer is kept as its digits): sending it "
            "again stores nothing new.",
        }
    }
    for name, field in derived["properties"].items():
        plain = {key: value for key, value in field.items() if key != "title"}
        properties[name] = plain | _NEW_MESSAGE_RULES.get(name, {})
    return {
        "type": "object",
        "required": derived["required"],
        "additionalProperties": derived["additionalProperties"],
        "properties": properties,
    }


_MESSAGES = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "messages": {"type": "array", "items": {"$ref": "#/components/schemas/Message"}}
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON body of `schema`."""
    return {"content": {"application/json": {"schema": schema}}}


_WORDS = {
    400: "A field is missing or wrong; the error names it.",
    401: "No token, one nobody was given, or one whose owner is disabled or gone.",
    403: "Without tokens (open on loopback): a foreign host name, or another site's page.",
    404: "Not found; the error says what.",
    413: "The body is larger than api.max_body_bytes.",
    415: "The body is not sent as Content-Type: application/json.",
    429: "Too many requests (see Retry-After), or too many open event streams.",
    502: "The upstream cannot be reached, broke off, or answered too much.",
    503: "The database cannot be read, no upstream is configured, or the daemon is stopping.",
    504: "The upstream did not answer within model.timeout_s.",
}
API_ERRORS = {
    ("/v1/messages", "post"): (400, 401, 403, 413, 415, 429, 503),
    ("/v1/messages", "get"): (400, 401, 403, 404, 429, 503),
    ("/v1/events", "get"): (400, 401, 403, 429, 503),
    ("/v1/status", "get"): (401, 403, 429, 503),
    ("/v1/chat/completions", "post"): (400, 401, 403, 413, 415, 429, 502, 503, 504),
    ("/v1/models", "get"): (401, 403, 429, 502, 503, 504),
    ("/v1/embeddings", "post"): (400, 401, 403, 413, 415, 429, 502, 503, 504),
    ("/v1/tasks/chat/completions", "post"): (400, 401, 403, 413, 415, 429, 502, 503, 504),
    ("/v1/tasks/models", "get"): (401, 403, 429, 502, 503, 504),
}
RELAYED = (
    "/v1/chat/completions",
    "/v1/models",
    "/v1/embeddings",
    "/v1/tasks/chat/completions",
    "/v1/tasks/models",
)
"""The relay's routes, which answer errors as an OpenAI-compatible server does."""
"""The error statuses each route answers with."""


def _errors(path: str, method: str) -> dict[str, Any]:
    """The error answers of a route, in the API's or the relay's shape."""
    schema = "RelayError" if path in RELAYED else "Error"
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {str(s): {"description": _WORDS[s], **_json(ref)} for s in API_ERRORS[path, method]}


def _passed(path: str, method: str, summary: str) -> dict[str, Any]:
    """A relay route whose upstream answer is passed back as it came."""
    answer = {"description": "The upstream's answer, passed through.", **_json({})}
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": answer, **_errors(path, method)},
    }
    if method == "post":
        operation["requestBody"] = {"required": True, **_json({"type": "object"})}
    return {method: operation}


def _ref(name: str) -> dict[str, str]:
    """A reference to one of the document's schemas."""
    return {"$ref": f"#/components/schemas/{name}"}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every `/v1/` endpoint."""
    security: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "backthink API",
            "version": VERSION,
            "description": "The owner's main session for chat apps, the companion's pushes as "
            "they are delivered, and an OpenAI-compatible relay. A bearer token "
            "(`backthink owners token ID`) names the owner.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": _ERROR,
                "RelayError": _RELAY_ERROR,
                "Message": _MESSAGE,
                "NewMessage": _new_message(),
                "Messages": _MESSAGES,
            },
        },
        "security": security,
        "paths": {
            "/v1/messages": {
                "post": {
                    "summary": "Add one message or a list to the main session (idempotent by id)",
                    "requestBody": {
                        "required": True,
                        **_json(
                            {
                                "oneOf": [
                                    _ref("NewMessage"),
                                    {"type": "array", "items": _ref("NewMessage")},
                                ]
                            }
                        ),
                    },
                    "responses": {
                        "200": {"description": "As stored.", **_json(_ref("Messages"))},
                        **_errors("/v1/messages", "post"),
                    },
                },
                "get": {
                    "summary": "The main session, oldest first; without after, the newest limit",
                    "parameters": [
                        {
                            "name": "after",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                            "description": "A message id of this session: the messages after it.",
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0, "maximum": 1000},
                            "description": "At most this many (default 50).",
                        },
                        {
                            "name": "all",
                            "in": "query",
                            "schema": {"type": "integer", "enum": [0, 1]},
                            "description": "1: also the superseded turns, marked so.",
                        },
                    ],
                    "responses": {
                        "200": {"description": "A page of the session.", **_json(_ref("Messages"))},
                        **_errors("/v1/messages", "get"),
                    },
                },
            },
            "/v1/events": {
                "get": {
                    "summary": "The owner's pushes as Server-Sent Events (event: push)",
                    "description": "Each event's id is the message id and its data the message "
                    "object; Last-Event-ID resumes after that push (without it the stream "
                    "begins after the newest push); a comment line keeps the stream alive at "
                    "least every 15 s. An owner holds at most 8 streams open. While a stream is "
                    "open the session channel counts as connected.",
                    "parameters": [
                        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": {
                            "description": "The stream.",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **_errors("/v1/events", "get"),
                    },
                },
            },
            "/v1/status": {
                "get": {
                    "summary": "The owner's `backthink status --json` object",
                    "responses": {
                        "200": {"description": "The status.", **_json({"type": "object"})},
                        **_errors("/v1/status", "get"),
                    },
                },
            },
            "/v1/chat/completions": {
                "post": {
                    "summary": "The relay: an OpenAI chat completion, streamed or not",
                    "description": "Forwarded to relay.upstream; the new user messages and the "
                    "complete reply are kept in the main session, and the pushes since the "
                    "previous turn are shown to the model before the trailing user messages. "
                    'A stream that breaks off ends with one `data: {"error": ...}` event.',
                    "requestBody": {"required": True, **_json({"type": "object"})},
                    "responses": {
                        "200": {
                            "description": "The upstream's answer, passed through.",
                            "content": {
                                "application/json": {"schema": {"type": "object"}},
                                "text/event-stream": {"schema": {"type": "string"}},
                            },
                        },
                        **_errors("/v1/chat/completions", "post"),
                    },
                },
            },
            "/v1/models": {
                "get": {
                    "summary": "The upstream's models, passed through",
                    "responses": {
                        "200": {"description": "The model list.", **_json({"type": "object"})},
                        **_errors("/v1/models", "get"),
                    },
                },
            },
            "/v1/embeddings": _passed(
                "/v1/embeddings", "post", "Embeddings, forwarded as they came, kept nowhere"
            ),
            "/v1/tasks/chat/completions": _passed(
                "/v1/tasks/chat/completions",
                "post",
                "A chat front-end's own task (a title, tags, a summary): forwarded as it came, "
                "kept nowhere, no pushes shown",
            ),
            "/v1/tasks/models": _passed(
                "/v1/tasks/models", "get", "The upstream's models, for a task connection"
            ),
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1.", **_json({})}},
                },
            },
        },
    }
