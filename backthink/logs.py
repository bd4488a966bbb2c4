"""structlog setup: JSON lines off a TTY (journald keeps them), console rendering on one."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure(
    *, stream: TextIO | None = None, json: bool | None = None, level: str = "info"
) -> None:
    """Configure structlog once for the process.

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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if json else structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
