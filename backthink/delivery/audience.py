"""Who is watching each owner's session through the API.

With the API on, the session channel (type web) is honest: it is connected
for an owner only while a client of that owner holds an event stream open,
or read the session within `api.seen_window`. Otherwise a push on it would
be a row nobody reads, and the gate's channel choice moves on to a channel
that reaches the owner. Every push of the owner, on any channel, wakes the
owner's open streams, which then read it from the session.

Only the daemon serves the API, so only the daemon's audience sees its
clients. Any other process with the API configured (`backthink think`, a
worker) has an audience that sees nobody unless the daemon vouches for a
client before a round (`backthink.host.witness`): there the session channel
counts as not connected unless the daemon says otherwise.

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

    def __init__(self, seen_window: timedelta, *, serves: bool = True) -> None:
        """A client that read the session within `seen_window` counts as present.

        `serves` is True in the process that serves the API (the daemon); an
        audience of another process sees only what the daemon vouches for.
        """
        self._window = seen_window
        self.serves = serves
        self._streams: dict[str, set[asyncio.Event]] = {}
        self._seen: dict[str, datetime] = {}
        self._vouched: set[str] = set()

    def vouch(self, owner_id: str, watched: bool) -> None:
        """Take the daemon's word on whether a client of the owner watches now."""
        if watched:
            self._vouched.add(owner_id)
        else:
            self._vouched.discard(owner_id)

    def seen(self, owner_id: str, at: datetime) -> None:
        """A client of the owner read the session at `at`."""
        last = self._seen.get(owner_id)
        if last is None or at > last:
            self._seen[owner_id] = at

    def present(self, owner_id: str, at: datetime) -> bool:
        """Whether a client of the owner is there to see a push at `at`."""
        if self._streams.get(owner_id) or owner_id in self._vouched:
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
