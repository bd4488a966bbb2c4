"""What only the running daemon knows about an owner: its next heartbeat, channels, turns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

LAST_ERROR_CHARS = 300  # characters of the relay's last failure shown at most


@dataclass(frozen=True)
class LiveStatus:
    """The daemon's own view of one owner, as its socket and its page report it."""

    next_heartbeat: datetime | None = None
    channels: dict[str, str] = field(default_factory=dict)
    """Each configured channel: "ok", or "down" while its circuit breaker holds."""
    watched: bool | None = None
    """Whether a client of the owner watches its session through the API (None: no API)."""
    turns: dict[str, int] = field(default_factory=dict)
    """The owner's turns in flight in the daemon: `{"rounds": N, "relay": N}`."""
    relay: dict[str, Any] = field(default_factory=dict)
    """The owner's relay calls since the daemon started: `{"calls", "failed", "last_error"}`."""

    def to_json(self) -> dict[str, Any]:
        """The object the daemon's socket answers with; times ISO 8601 in UTC."""
        at = self.next_heartbeat
        found: dict[str, Any] = {
            "next_heartbeat": at.astimezone(UTC).isoformat() if at is not None else None,
            "channels": dict(self.channels),
        }
        if self.watched is not None:
            found["watched"] = self.watched
        if self.turns:
            found["turns"] = dict(self.turns)
        if self.relay:
            found["relay"] = dict(self.relay)
        return found

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LiveStatus:
        """Read the socket's answer, typed at the edge: anything unexpected is left out."""
        watched = value.get("watched")
        return cls(
            _aware_time(value.get("next_heartbeat")),
            _health(value.get("channels")),
            watched if isinstance(watched, bool) else None,
            _counts(value.get("turns")),
            _relay(value.get("relay")),
        )


Live = Callable[[str], LiveStatus]
"""Asks the running daemon about an owner."""


def _health(value: object) -> dict[str, str]:
    """The daemon's channel map; a value other than "ok" counts as "down"."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "ok" if v == "ok" else "down" for k, v in value.items()}


def _counts(value: object) -> dict[str, int]:
    """The daemon's turns in flight: its "rounds" and "relay" counts, each a small whole number."""
    if not isinstance(value, Mapping):
        return {}
    found = {k: value.get(k) for k in ("rounds", "relay")}
    return {k: v for k, v in found.items() if type(v) is int and 0 <= v < 1_000_000}


def _relay(value: object) -> dict[str, Any]:
    """The daemon's relay figures: two small whole numbers and the last failure's words."""
    if not isinstance(value, Mapping):
        return {}
    counts = {k: value.get(k) for k in ("calls", "failed")}
    if not all(type(v) is int and 0 <= v < 10**12 for v in counts.values()):
        return {}
    last = value.get("last_error")
    return {**counts, "last_error": last[:LAST_ERROR_CHARS] if isinstance(last, str) else None}


def _aware_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None
