"""structlog setup: JSON lines off a TTY (journald keeps them), console rendering on one.

Libraries that log through the standard `logging` module (APScheduler,
SQLAlchemy, alembic) are rendered by the same processors, at WARNING and above
only, so the stream stays one format.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
import structlog.tracebacks

from backthink.redact import redact_urls


def configure(
    *, stream: TextIO | None = None, json: bool | None = None, level: str = "info"
) -> None:
    """Configure structlog (and the standard logging bridge) once for the process.

    Args:
        stream: where log lines go (stdout for the daemon, stderr for one-shot commands).
        json: force JSON lines (True) or console output (False); None picks by TTY.
        level: the lowest level shown: debug, info, warning or error.
    """
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # Tracebacks keep their frames but never the frames' local variables: those
    # hold message, prompt and reply text (structlog shows them by default).
    exc = (
        structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False, use_rich=False)
        )
        if json
        else structlog.processors.format_exc_info
    )
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*shared, exc, redact_event, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                exc,
                redact_event,
                renderer,
            ],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(numeric, logging.WARNING))


def redact_event(
    logger: object, method_name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Mask credentials in every URL of a log line, tracebacks included.

    Call sites log endpoints and errors as they are; this one processor makes
    sure no `user:pass@` or `?token=` reaches the stream, whoever logged it.
    """
    return {key: _redact_value(value) for key, value in event_dict.items()}


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, dict):
        return {key: _redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(item) for item in value)
    return value
