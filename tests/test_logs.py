"""Log lines carry no private text: tracebacks keep their frames but not their locals."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from backthink.host import logs

POKE_TEXT = "日程：十点去医院复查，别告诉别人"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """JSON log lines captured from structlog and the standard logging bridge."""
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers, root.level
    logs.configure(stream=out, json=True, level="debug")
    try:
        yield out
    finally:
        structlog.reset_defaults()
        root.handlers, root.level = handlers, level


def crash(trigger: str) -> None:
    """Fail with the trigger text in a local variable, as a round would."""
    prompt = f"触发：{trigger}"
    raise RuntimeError(f"boom after {len(prompt)} characters")


def test_a_logged_exception_carries_no_local_variables(stream: io.StringIO) -> None:
    """log.exception keeps the frames of a crash and drops every local value."""
    try:
        crash(POKE_TEXT)
    except RuntimeError:
        structlog.get_logger("t").exception("round.crashed")
    (line,) = [json.loads(raw) for raw in stream.getvalue().splitlines()]
    assert POKE_TEXT not in stream.getvalue()
    (stack,) = line["exception"]
    assert stack["exc_type"] == "RuntimeError"
    assert [frame["name"] for frame in stack["frames"]][-1] == "crash"
    assert all("locals" not in frame or not frame["locals"] for frame in stack["frames"])


def test_an_asyncio_task_traceback_carries_no_local_variables(stream: io.StringIO) -> None:
    """A task error logged by asyncio through the standard logging bridge leaks no locals."""

    async def task(trigger: str) -> None:
        crash(trigger)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_task(task(POKE_TEXT))
        await asyncio.wait([future])
        loop.call_exception_handler(
            {"message": "Task exception was never retrieved", "exception": future.exception()}
        )

    asyncio.run(main())
    out = stream.getvalue()
    assert "Task exception was never retrieved" in out
    assert "RuntimeError" in out
    assert POKE_TEXT not in out
