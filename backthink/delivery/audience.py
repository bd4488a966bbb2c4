"""Who is watching each owner's session through the API, in this process.

With the API on, the session channel (type web) is honest: it is connected
for an owner only while a client of that owner holds an event stream open,
or read the session within `api.seen_window`. Otherwise a push on it would
be a row nobody reads, and the gate's channel choice moves on to a channel
that reaches the owner. Every push of the owner, on any channel, wakes the
owner's open streams, which then read it from the session.

Without the API there is no audience and the session channel is always
connected, as it always was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta


class Audience:
    """The open event streams and the latest session reads of every owner."""

    def __init__(self, seen_window: timedelta) -> None:
        """A client that read the session within `seen_window` counts as present."""
        self._window = seen_window
        self._streams: dict[str, set[asyncio.Event]] = {}
        self._seen: dict[str, datetime] = {}

    def seen(self, owner_id: str, at: datetime) -> None:
        """A client of the owner read the session at `at`."""
        last = self._seen.get(owner_id)
        if last is None or at > last:
            self._seen[owner_id] = at

    def present(self, owner_id: str, at: datetime) -> bool:
        """Whether a client of the owner is there to see a push at `at`."""
        if self._streams.get(owner_id):
            return True
        last = self._seen.get(owner_id)
        return last is not None and at - last < self._window

    def streams(self, owner_id: str) -> int:
        """How many event streams of the owner are open."""
        return len(self._streams.get(owner_id, ()))

    @contextmanager
    def listening(self, owner_id: str) -> Iterator[asyncio.Event]:
        """Hold an event stream of the owner open; the event is set at each of its pushes."""
        wake = asyncio.Event()
        self._streams.setdefault(owner_id, set()).add(wake)
        try:
            yield wake
        finally:
            held = self._streams.get(owner_id)
            if held is not None:
                held.discard(wake)
                if not held:
                    del self._streams[owner_id]

    def announce(self, owner_id: str) -> None:
        """The owner's session got a push: wake every open stream of the owner."""
        for wake in self._streams.get(owner_id, ()):
            wake.set()

    def of(self, owner_id: str) -> OwnerAudience:
        """The audience of one owner, as that owner's dispatcher asks it."""
        return OwnerAudience(self, owner_id)


@dataclass(frozen=True)
class OwnerAudience:
    """One owner's view of the audience: is anyone watching, and a push to announce."""

    audience: Audience
    owner_id: str

    def present(self, at: datetime) -> bool:
        """Whether a client of the owner is there to see a push at `at`."""
        return self.audience.present(self.owner_id, at)

    def announce(self) -> None:
        """Wake the owner's open streams: a push is in the session."""
        self.audience.announce(self.owner_id)
