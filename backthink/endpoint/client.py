"""The openai adapter: one chat-completion round against any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import openai
import structlog

from backthink.config import ModelSettings
from backthink.decision.structured import SchemaForm
from backthink.endpoint.attempt import WholeAttemptClient, call_budget
from backthink.endpoint.body import request_body
from backthink.endpoint.learned import SchemaFormMemory
from backthink.endpoint.wire import (
    SCHEMA_REFUSAL,
    SCHEMA_REFUSAL_STATUSES,
    Completion,
    ModelList,
    error_detail,
    parse,
    refuses_images,
    refuses_tools,
    tool_calls,
    unusable,
    withheld,
)
from backthink.errors import (
    ModelError,
    ModelNotConfiguredError,
    ModelTimeoutError,
    ToolsRefusedError,
)
from backthink.ports import Clock, Marks
from backthink.records import ModelMessage, ModelReply
from backthink.redact import redact_urls

PLACEHOLDER_API_KEY = "not-needed"
"""Sent when no key is configured: local servers (llama.cpp, Ollama, vLLM) ignore it,
while the SDK refuses to build a client without one."""

DEFAULT_CONFIG_LOCATION = "the config file"
PROBE_MAX_TOKENS = 1  # tokens; the fallback probe only needs the endpoint to answer
DETAIL_MAX_CHARS = 160  # characters of a server's error message kept in our error
# OpenAI-style keys, whole or masked ("sk-abc1****wxyz"), as some servers echo them.
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_*\-]{4,}")
_REDACTED = "[redacted]"

log = structlog.get_logger(__name__)


NOT_LISTED = "is not listed"
"""What a probe says of a model name the endpoint's model list does not hold."""
LISTED_SHOWN = 5  # model names a probe names at most
MODEL_NAME_CHARS = 80  # characters of one listed model name shown at most


class OpenAIModelClient:
    """A ModelClient backed by `openai.AsyncOpenAI`; SDK objects never leave this class.

    The request carries `model`, `messages` and `max_tokens` (plus `tools` when offered,
    `response_format` in json_schema mode) and nothing else, because some local servers
    reject parameters they do not know. Replies are read from the raw
    JSON body into small lenient models, so a server that bends the schema (extra
    fields, a missing `usage`) still works and one that breaks it fails with a clear
    ModelError instead of a half-built SDK object.

    When `settings.api_key` is None the placeholder key "not-needed" is sent: servers
    such as llama.cpp and Ollama ignore the Authorization header, and the SDK needs some
    key to build a client.
    """

    def __init__(
        self,
        settings: ModelSettings,
        *,
        config_location: str = DEFAULT_CONFIG_LOCATION,
        channels: Sequence[str] = (),
        marks: Marks | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Build the SDK client; no request is sent yet.

        Args:
            settings: the [model] section of the configuration.
            config_location: where the configuration lives, named in the error when
                no endpoint is configured.
            channels: the configured channel names, which a json_schema reply may name.
            marks: where what the client learns of the endpoint (it reads only the
                older schema form) is kept for every process; with `clock`.
            clock: the time of those marks.

        Raises:
            ModelNotConfiguredError: `settings.base_url` is not set.
        """
        if settings.base_url is None:
            raise ModelNotConfiguredError(
                "no model endpoint configured: set model.base_url in "
                f"{config_location} or BACKTHINK_MODEL__BASE_URL"
            )
        self._settings = settings
        self._base_url = settings.base_url
        self._api_key = (
            settings.api_key.get_secret_value() if settings.api_key is not None else None
        )
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=self._api_key or PLACEHOLDER_API_KEY,
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
            http_client=WholeAttemptClient(attempt_s=settings.timeout_s),
        )
        self._budget_s = call_budget(settings.timeout_s, settings.max_retries)
        self._closed = False
        self._channels = list(channels)
        # Learned once per client: the endpoint refused image input (vision = "auto").
        self._image_refusal: str | None = None
        # Learned once, and kept in the marks: the endpoint reads only the older schema form.
        self._schema_form: SchemaForm = "json_schema"
        self._learned = SchemaFormMemory(settings, marks, clock)

    @property
    def model_name(self) -> str:
        """The model name sent with every request."""
        return self._settings.name

    async def complete(
        self, messages: Sequence[ModelMessage], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """Run one chat-completion round, offering `tools` (chat-completions entries) if any.

        Latency covers the whole call, retries included, because that is what a round
        waits for. With tools offered a reply may carry tool calls and no text.

        Raises:
            ModelTimeoutError: the endpoint did not answer within `timeout_s`.
            ToolsRefusedError: tools were offered and the endpoint refused them.
            ModelError: HTTP error, refused connection, or a reply with no usable text.
        """
        self._check_open()
        if self._settings.output == "json_schema" and await self._learned.older_form():
            self._schema_form = "json_object"
        started = time.perf_counter()
        images = sum(1 for m in messages if m.image)
        send_images = self.sends_images
        notes: list[str] = []
        if images and not send_images and self._image_refusal is not None:
            notes.append(withheld(images, f"{self._image_refusal} earlier"))
        with self._translate_errors(messages):
            try:
                body = await self._post(self._body(messages, images=send_images, tools=tools))
            except openai.APIStatusError as exc:
                if tools and refuses_tools(exc):
                    raise ToolsRefusedError(
                        f"the endpoint refused tool definitions (HTTP {exc.status_code})"
                    ) from None
                retry_images = send_images
                if self._refuses_schema_form(exc):
                    # Asked once more in the older form; a refusal of that one is an error.
                    self._schema_form = "json_object"
                    log.warning("model.schema_form_refused", status=exc.status_code)
                    await self._learned.refused()
                    notes.append(
                        "response_format_fallback: the endpoint refused the json_schema form "
                        f"(HTTP {exc.status_code}); json_object with a schema from now on"
                    )
                elif images and send_images and self._settings.vision == "auto":
                    if not refuses_images(exc):
                        raise
                    self._image_refusal = (
                        f"the endpoint refused image input (HTTP {exc.status_code})"
                    )
                    log.warning("model.images_refused", status=exc.status_code)
                    notes.append(withheld(images, f"{self._image_refusal}; retried without"))
                    retry_images = False
                else:
                    raise
                body = await self._post(self._body(messages, images=retry_images, tools=tools))
        latency_ms = (time.perf_counter() - started) * 1000
        completion = parse(Completion, body)
        if not completion.choices:
            raise unusable("the reply has no choices")
        choice = completion.choices[0]
        text = choice.message.content
        # Read even when no tools were offered: a model that still asks for them on a
        # round's last, tool-less turn has run out of tool steps, which the loop judges.
        calls = tool_calls(choice.message)
        if not calls and (text is None or not text.strip()):
            finish = f" (finish_reason={choice.finish_reason})" if choice.finish_reason else ""
            raise unusable(f"the reply has no text content{finish}")
        usage = completion.usage
        return ModelReply(
            text=text or "",
            tool_calls=calls,
            model=completion.model or self._settings.name,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_ms=latency_ms,
            notes=notes,
        )

    def _body(
        self,
        messages: Sequence[ModelMessage],
        *,
        images: bool,
        tools: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        return request_body(
            self._settings,
            messages,
            images=images,
            tools=tools,
            schema_form=self._schema_form,
            channels=self._channels,
        )

    def _refuses_schema_form(self, exc: openai.APIStatusError) -> bool:
        """Whether an error answer refuses the OpenAI response_format form this client sent."""
        if self._settings.output != "json_schema" or self._schema_form != "json_schema":
            return False
        if exc.status_code not in SCHEMA_REFUSAL_STATUSES:
            return False
        return bool(SCHEMA_REFUSAL.search(error_detail(exc.body) or exc.message))

    @property
    def sends_images(self) -> bool:
        """Whether the next request carries image parts, given the setting and what was learned."""
        vision = self._settings.vision
        return vision is True or (vision == "auto" and self._image_refusal is None)

    async def _post(self, request: dict[str, Any]) -> str:
        # The payload is already plain JSON for the server, so the SDK's generic
        # POST is used: it keeps auth, timeouts, retries and error mapping, and
        # skips the per-field TypedDict transform `chat.completions.create` runs,
        # which costs several milliseconds of CPU per round.
        async with self._within_budget():
            return await self._client.post("/chat/completions", cast_to=str, body=request)

    @asynccontextmanager
    async def _within_budget(self) -> AsyncIterator[None]:
        """Bound a call, its retries and the pauses between them, by `call_budget`.

        Raises:
            ModelTimeoutError: the call did not end within its budget.
        """
        try:
            async with asyncio.timeout(self._budget_s):
                yield
        except TimeoutError:
            raise ModelTimeoutError(
                f"model endpoint gave no complete answer within {self._budget_s:g}s "
                f"(model.timeout_s = {self._settings.timeout_s:g} for each of "
                f"{self._settings.max_retries + 1} attempts)"
            ) from None

    async def probe(self) -> str:
        """Check that the endpoint answers, for `backthink check`.

        Lists the models (GET /models). Servers that do not implement that answer 404;
        then a one-token chat completion stands in.

        Returns:
            One short line describing what the endpoint said.

        Raises:
            ModelTimeoutError: the endpoint did not answer within `timeout_s`.
            ModelError: any other failure.
        """
        self._check_open()
        with self._translate_errors(()):
            try:
                async with self._within_budget():
                    raw = await self._client.models.with_raw_response.list()
            except openai.NotFoundError:
                async with self._within_budget():
                    return await self._probe_chat()
            body = raw.text
        ids = [entry.id for entry in parse(ModelList, body).data]
        count = f"{len(ids)} model" + ("" if len(ids) == 1 else "s")
        if self.model_name in ids:
            return f"{self._host()} lists {count}; {self.model_name!r} is listed"
        # Names only as the server gave them, bounded: they help fix a typo.
        shown = ", ".join(repr(i[:MODEL_NAME_CHARS]) for i in ids[:LISTED_SHOWN])
        more = ", ..." if len(ids) > LISTED_SHOWN else ""
        among = f" (it lists {shown}{more})" if ids else ""
        return f"{self._host()} lists {count}; {self.model_name!r} {NOT_LISTED}{among}"

    async def _probe_chat(self) -> str:
        started = time.perf_counter()
        raw = await self._client.chat.completions.with_raw_response.create(
            model=self._settings.name,
            messages=[{"role": "user", "content": "ping"}],
            max_tokens=PROBE_MAX_TOKENS,
        )
        latency_ms = (time.perf_counter() - started) * 1000
        # A one-token reply may carry no text at all (a reasoning model is still
        # thinking); a well-formed completion is enough to show the endpoint works.
        parse(Completion, raw.text)
        return (
            f"{self._host()} has no model list; a chat completion with "
            f"{self.model_name!r} answered in {latency_ms:.0f} ms"
        )

    async def close(self) -> None:
        """Close the HTTP connections; later calls raise ModelError. Closing twice is fine."""
        self._closed = True
        await self._client.close()

    async def __aenter__(self) -> OpenAIModelClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _check_open(self) -> None:
        # A round that starts while the daemon shuts down should fail like any other
        # model failure (recorded, no traceback), not with the HTTP library's RuntimeError.
        if self._closed:
            raise ModelError("the model client is closed")

    def _host(self) -> str:
        """The endpoint's host and port, without any credentials or path."""
        parts = urlsplit(self._base_url)
        host = parts.hostname or self._base_url
        return f"{host}:{parts.port}" if parts.port else host

    @contextmanager
    def _translate_errors(self, messages: Sequence[ModelMessage]) -> Iterator[None]:
        """Turn SDK exceptions into ModelError / ModelTimeoutError with secret-free messages."""
        try:
            yield
        except openai.APITimeoutError:
            raise ModelTimeoutError(
                f"model endpoint timed out after {self._settings.timeout_s:g}s"
            ) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            reason = f"{type(cause).__name__}: {cause}" if cause else exc.message
            detail = self._scrub(reason, messages)
            raise ModelError(f"cannot reach model endpoint {self._host()}: {detail}") from None
        except openai.APIStatusError as exc:
            detail = self._scrub(error_detail(exc.body), messages)
            suffix = f": {detail}" if detail else ""
            raise ModelError(f"model endpoint answered HTTP {exc.status_code}{suffix}") from None
        except openai.APIResponseValidationError:
            raise unusable("the reply does not match the chat-completions schema") from None
        except openai.OpenAIError as exc:
            # Anything else from the SDK: its message may quote the request, so only
            # the kind of failure is kept.
            raise ModelError(f"model endpoint call failed: {type(exc).__name__}") from None

    def _scrub(self, text: str, messages: Sequence[ModelMessage]) -> str:
        """Shorten a server's text and remove the key and any echoed request text."""
        if self._api_key:
            text = text.replace(self._api_key, _REDACTED)
        text = _KEY_LIKE.sub(_REDACTED, redact_urls(text))
        for message in messages:
            for value in (message.text, message.image):
                if value and value.strip():
                    text = text.replace(value, _REDACTED)
        text = " ".join(text.split())
        if len(text) > DETAIL_MAX_CHARS:
            text = text[: DETAIL_MAX_CHARS - 1] + "…"
        return text
