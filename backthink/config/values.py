"""Value types of the settings: durations, quiet-hour ranges, listen addresses."""

from __future__ import annotations

import math
import re
from datetime import time, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# The longest duration any setting or pause takes: ten years, far inside what a
# timedelta holds, so a typo of many digits is an error and not an overflow.
MAX_DURATION = timedelta(days=3650)


def parse_duration(value: Any) -> timedelta:
    """Parse "90s", "30m", "2h", "1h30m", "1d" or a number of seconds into a timedelta.

    Raises:
        ValueError: not a duration, negative, not finite, or longer than `MAX_DURATION`.
    """
    if isinstance(value, timedelta):
        return _bounded(value.total_seconds(), value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _bounded(float(value), value)
    if not isinstance(value, str):
        raise ValueError("expected a duration such as '30m', '2h' or '90s'")
    text = value.strip().lower().replace(" ", "")
    if text.replace(".", "", 1).isdigit():
        return _bounded(float(text), value)
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{value!r} is not a duration such as '30m', '2h' or '90s'")
    return _bounded(total, value)


def _bounded(seconds: float, written: Any) -> timedelta:
    """`seconds` as a timedelta when it is a usable duration; else a ValueError naming it."""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{written!r} is not a duration: it must not be negative")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{written!r} is too long: at most {MAX_DURATION.days} days")
    return timedelta(seconds=seconds)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class QuietHours(BaseModel):
    """A daily range of local wall-clock time, e.g. 23:00-07:00 (may cross midnight)."""

    model_config = ConfigDict(frozen=True)

    start: time
    end: time

    @classmethod
    def parse(cls, value: Any) -> QuietHours | None:
        """Parse "HH:MM-HH:MM"; an empty string or "off" disables quiet hours."""
        if value is None or isinstance(value, QuietHours):
            return value
        if isinstance(value, dict):
            return cls.model_validate(value)
        text = str(value).strip()
        if text.lower() in {"", "off", "none"}:
            return None
        match = re.fullmatch(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})", text)
        if not match:
            raise ValueError(f"{value!r} is not a range such as '23:00-07:00'")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        try:
            start, end = time(h1, m1), time(h2, m2)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        if start == end:
            raise ValueError(f"{value!r} is empty: start and end are the same time")
        return cls(start=start, end=end)

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def split_listen(value: str) -> tuple[str, int]:
    """Split "127.0.0.1:8765" or "[::1]:8765" into host and port.

    Raises:
        ValueError: not HOST:PORT with a port from 1 to 65535.
    """
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # Port 0 takes any free port (tests); the daemon logs the one it got in web.ready.
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT such as '127.0.0.1:8765'")
    return host, int(port)
