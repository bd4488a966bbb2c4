"""The owner-state file: JSON written by other programs, read once per round."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from backthink.models import RoundState, StateProblem, StateReading

# A snapshot dated slightly in the future is clock skew between machines, not an error.
FUTURE_SKEW = timedelta(minutes=5)


class FileStateProvider:
    """Reads `state.file`. Missing, stale or broken files are "unknown", never an error.

    A file without `updated_at` is dated by its modification time, so a script
    that only rewrites the file still keeps it fresh.
    """

    def __init__(self, path: Path | None, max_age: timedelta) -> None:
        self._path = path
        self._max_age = max_age

    def read(self, at: datetime) -> StateReading:
        """Read the state as seen at `at`."""
        if self._path is None:
            return StateReading(problem=StateProblem.NOT_CONFIGURED)
        try:
            raw = self._path.read_bytes()
            mtime = datetime.fromtimestamp(self._path.stat().st_mtime, tz=UTC)
        except FileNotFoundError:
            return StateReading(problem=StateProblem.MISSING)
        except OSError as exc:
            return StateReading(problem=StateProblem.UNREADABLE, detail=exc.strerror)
        return parse_state(raw, at=at, max_age=self._max_age, fallback_time=mtime)


def parse_state(
    raw: bytes | str, *, at: datetime, max_age: timedelta, fallback_time: datetime | None = None
) -> StateReading:
    """Validate a state document and judge its freshness at `at`."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return StateReading(problem=StateProblem.INVALID, detail=f"not JSON ({exc})")
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
