"""The owner-state file: JSON written by other programs, read once per round."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from backthink.models import FUTURE_SKEW, RoundState, StateProblem, StateReading

DEFAULT_MAX_BYTES = 65_536  # bytes; the default of state.max_bytes


class FileStateProvider:
    """Reads `state.file`. Missing, stale or broken files are "unknown", never an error.

    A file without `updated_at` is dated by its modification time, so a script
    that only rewrites the file still keeps it fresh. A file larger than
    `max_bytes` is unknown too: at most `max_bytes + 1` bytes of it are ever
    read, so a runaway writer cannot make every round load megabytes.
    """

    def __init__(
        self, path: Path | None, max_age: timedelta, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._path = path
        self._max_age = max_age
        self._max_bytes = max_bytes

    def read(self, at: datetime) -> StateReading:
        """Read the state as seen at `at`."""
        if self._path is None:
            return StateReading(problem=StateProblem.NOT_CONFIGURED)
        too_large = StateReading(
            problem=StateProblem.TOO_LARGE, detail=f"larger than {self._max_bytes} bytes"
        )
        try:
            with self._path.open("rb") as file:
                info = os.fstat(file.fileno())
                if info.st_size > self._max_bytes:
                    return too_large
                # The size may be wrong (a pipe, a file still being written): the
                # read itself is bounded too.
                raw = file.read(self._max_bytes + 1)
        except FileNotFoundError:
            return StateReading(problem=StateProblem.MISSING)
        except OSError as exc:
            return StateReading(problem=StateProblem.UNREADABLE, detail=exc.strerror)
        if len(raw) > self._max_bytes:
            return too_large
        mtime = datetime.fromtimestamp(info.st_mtime, tz=UTC)
        return parse_state(raw, at=at, max_age=self._max_age, fallback_time=mtime)


def parse_state(
    raw: bytes | str, *, at: datetime, max_age: timedelta, fallback_time: datetime | None = None
) -> StateReading:
    """Validate a state document and judge its freshness at `at`."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return StateReading(problem=StateProblem.INVALID, detail=f"not JSON ({exc})")
    except RecursionError:
        return StateReading(problem=StateProblem.INVALID, detail="not JSON (nested too deep)")
    if not isinstance(data, dict):
        return StateReading(
            problem=StateProblem.INVALID, detail="the document must be a JSON object"
        )
    try:
        state = RoundState.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"]) or "document"
        return StateReading(problem=StateProblem.INVALID, detail=f"{key}: {err['msg']}")
    stamp = state.updated_at or fallback_time
    if stamp is None:
        return StateReading(problem=StateProblem.UNDATED)
    if stamp > at + FUTURE_SKEW:
        return StateReading(problem=StateProblem.FROM_FUTURE)
    if at - stamp > max_age:
        return StateReading(problem=StateProblem.STALE)
    if state.updated_at is None:
        state = state.model_copy(update={"updated_at": stamp})
    return StateReading(state=state)
