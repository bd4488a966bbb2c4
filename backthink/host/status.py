"""`backthink status`: is the daemon running, is the owner paused, how did the last round end.

Most of the answer is in the database, shared by every process: the pause,
the last round, the pending deliveries, and which channels failed every try
and are down for their cooldown (whichever process tried them). Only the
running daemon knows its next heartbeat (whether a channel it serves is
connected at all, and the owner's turns in flight in it: rounds and relay
turns); it answers a status request on its socket. On PostgreSQL a round
any process runs shows by its owner's round lock. The model
endpoint is probed like `backthink check` does, within a few seconds and
without retries; the daemon's status routes share one probe at a time and
reuse its answer for `PROBE_FOR` (`ModelProbe`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from backthink.config import ModelSettings, Settings, WebChannelSettings
from backthink.delivery.dispatcher import CHANNEL_DOWN
from backthink.errors import BackthinkError, ModelNotConfiguredError
from backthink.host.live import LiveStatus
from backthink.host.poke import STATUS_TIMEOUT_S, ask_status
from backthink.host.turns import InFlight
from backthink.ports import Clock, Marks, ModelClient, Outbox, RoundStore
from backthink.records import RoundRecord
from backthink.redact import redact_urls
from backthink.round.pause import Pauses, PauseState
from backthink.round.spill import RESERVE_BYTES, Spill
from backthink.store import open_database
from backthink.store.turn_locks import round_running

MODEL_TIMEOUT_S = 5.0  # seconds the model probe may take at most
PENDING_SCAN = 1000  # pending deliveries counted at most; more than a few means trouble anyway
NOT_CONFIGURED = "not configured"
UNHEARD = (
    "nowhere to go: no client reads the session (GET /v1/events) and there is no other "
    "channel; add one (docs/api.md)"
)
LOW_SPACE_BYTES = RESERVE_BYTES  # bytes free on the database's disk below which it counts as full
PROBE_FOR = timedelta(seconds=5)  # how long a status route reuses a probe's answer about the model


@dataclass(frozen=True)
class DiskState:
    """Whether the database's disk is full: it has refused round records, or has no room left."""

    full: bool
    waiting: int = 0
    """Round records a full disk refused, kept in the reserve until the database takes them."""

    def describe(self) -> str:
        """One line for `status`."""
        if not self.full:
            return "ok"
        if self.waiting:
            return (
                f"full: {self.waiting} round record(s) wait in the reserve beside the database; "
                "free some space"
            )
        return "full: free some space, or rounds can no longer be recorded"


def disk_state(spill: Path | None) -> DiskState:
    """The disk of the database as its spill sees it (None: no spill, nothing to tell)."""
    if spill is None:
        return DiskState(full=False)
    waiting = Spill(spill).in_reserve()
    try:
        stats = os.statvfs(spill.parent)
    except OSError:
        return DiskState(full=waiting > 0, waiting=waiting)
    room = stats.f_bavail * stats.f_frsize
    return DiskState(full=waiting > 0 or room < LOW_SPACE_BYTES, waiting=waiting)


@dataclass(frozen=True)
class Status:
    """What `backthink status` shows about one owner."""

    running: bool
    pause: PauseState
    next_heartbeat: datetime | None
    last_round: RoundRecord | None
    pending_deliveries: int
    channels: dict[str, str] = field(default_factory=dict)
    model: str = NOT_CONFIGURED
    disk: DiskState = field(default_factory=lambda: DiskState(full=False))
    unwatched: tuple[str, ...] = ()
    """Session channels that are down only because no client watches them (the API is on)."""
    turns: InFlight = field(default_factory=InFlight)
    relay: dict[str, Any] = field(default_factory=dict)
    """The running daemon's relay calls of the owner (empty: no API, or no daemon)."""
    unheard: bool = False
    """Pushes have nowhere to go: no channel but the session's, and no client watches it."""

    def to_json(self) -> dict[str, Any]:
        """The `status --json` object; times ISO 8601 in UTC, null when there is none."""
        last = self.last_round
        return {
            "running": self.running,
            "paused": self.pause.paused,
            "paused_until": _iso(self.pause.until),
            "next_heartbeat": _iso(self.next_heartbeat),
            "last_round": None
            if last is None
            else {
                "outcome": last.outcome.value,
                "reason": last.reason,
                "at": _iso(last.started_at),
            },
            "pending_deliveries": self.pending_deliveries,
            "channels": dict(self.channels),
            "model": self.model,
            "disk": "full" if self.disk.full else "ok",
            "turns_in_flight": self.turns.to_json(),
        }

    def render(self, tz: ZoneInfo) -> str:
        """Readable lines, times in the owner's time zone."""
        daemon = "not running"
        if self.running:
            daemon = "running"
            if self.next_heartbeat is not None:
                daemon += f", next heartbeat {_local(self.next_heartbeat, tz)}"
        last = self.last_round
        rows = [
            ("daemon", daemon),
            ("pause", self.pause.describe(tz)),
            (
                "last round",
                "none yet"
                if last is None
                else f"{last.outcome.value} / {last.reason} at {_local(last.started_at, tz)}",
            ),
            ("deliveries", f"{self.pending_deliveries} pending"),
            (
                "channels",
                ", ".join(
                    f"{name} unwatched (no client reads the session now"
                    + ("" if self.unheard else ": pushes go to another channel")
                    + ")"
                    if name in self.unwatched
                    else f"{name} {health}"
                    for name, health in self.channels.items()
                )
                or "none configured",
            ),
            (
                "model",
                f"{self.model}: set model.base_url, or run `backthink init --detect`"
                if self.model == NOT_CONFIGURED
                else self.model,
            ),
            ("disk", self.disk.describe()),
            ("turns", _turns(self.turns)),
        ]
        if self.relay:
            rows.append(("relay", _relay(self.relay)))
        if self.unheard:
            rows.append(("pushes", UNHEARD))
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


async def stored_channels(
    settings: Settings, owner_id: str, *, marks: Marks, at: datetime
) -> dict[str, str]:
    """Channel health as the database keeps it: "down" while a failed channel cools down.

    Every process that delivers writes a channel's cooldown there when the
    channel fails every try (see `backthink.delivery.dispatcher`), so this
    holds whichever process tried it: the daemon, a `think`, a worker.

    Args:
        settings: the owner's configuration (its channels, in order).
        owner_id: whose channels.
        marks: the database's marks.
        at: now.
    """
    health: dict[str, str] = {}
    for name, channel in settings.channels.items():
        if isinstance(channel, WebChannelSettings):
            # The main session's write-back is its delivery; it cannot fail to send.
            health[name] = "ok"
            continue
        until = await marks.marked_at(owner_id, CHANNEL_DOWN + name)
        health[name] = "down" if until is not None and until > at else "ok"
    return health


async def model_health(settings: ModelSettings, *, client: ModelClient | None = None) -> str:
    """'ok', 'unreachable: <why>' or 'not configured'; within `MODEL_TIMEOUT_S`, no secrets.

    `client` is an open client to probe with (the running daemon's own, so a
    status request builds no new connection pool); without one, a quick client
    without retries is opened for the probe.
    """
    # Imported here: the openai SDK is slow to import, and only this check needs it.
    from backthink.endpoint.client import OpenAIModelClient

    if settings.base_url is None:
        return NOT_CONFIGURED
    timeout_s = min(settings.timeout_s, MODEL_TIMEOUT_S)
    quick = settings.model_copy(update={"timeout_s": timeout_s, "max_retries": 0})
    try:
        async with asyncio.timeout(timeout_s + 1):
            if client is not None:
                await client.probe()
            else:
                async with OpenAIModelClient(quick) as own:
                    await own.probe()
    except ModelNotConfiguredError:
        return NOT_CONFIGURED
    except TimeoutError:
        return f"unreachable: no answer within {timeout_s:g} s"
    except BackthinkError as exc:
        return f"unreachable: {redact_urls(str(exc))}"
    return "ok"


Probe = Callable[[ModelSettings, ModelClient | None], Awaitable[str]]
"""Probes the model endpoint of the settings (with an open client, if any): `model_health`."""


async def _model_health(settings: ModelSettings, client: ModelClient | None) -> str:
    return await model_health(settings, client=client)


class ModelProbe:
    """The model's health for status requests: at most one probe per endpoint per `fresh_for`.

    Status requests are cheap and clients poll them, many at once; a probe is
    a call to the endpoint. Requests that come while a probe is under way wait
    for it and share its answer (one flight), and its answer is reused until
    `fresh_for` has passed since it came.
    """

    def __init__(
        self, clock: Clock, *, fresh_for: timedelta = PROBE_FOR, probe: Probe = _model_health
    ) -> None:
        """Time the answers with `clock`; `probe` asks the endpoint (tests count its calls)."""
        self._clock = clock
        self._fresh_for = fresh_for
        self._probe = probe
        self._known: dict[tuple[str | None, str], tuple[datetime, str]] = {}
        self._flying: dict[tuple[str | None, str], asyncio.Future[str]] = {}

    async def health(self, settings: ModelSettings, client: ModelClient | None) -> str:
        """`model_health`'s answer: the fresh one known, the one under way, or a new probe's."""
        key = (settings.base_url, settings.name)
        known = self._known.get(key)
        if known is not None and self._clock.now() - known[0] < self._fresh_for:
            return known[1]
        flying = self._flying.get(key)
        if flying is None:
            flying = asyncio.ensure_future(self._fly(key, settings, client))
            self._flying[key] = flying
        # Shielded: a request that goes away leaves the probe to those still waiting.
        return await asyncio.shield(flying)

    async def _fly(
        self, key: tuple[str | None, str], settings: ModelSettings, client: ModelClient | None
    ) -> str:
        """Probe once, keep the answer with its time, and let the next request probe anew."""
        try:
            found = await self._probe(settings, client)
            self._known[key] = (self._clock.now(), found)
            return found
        finally:
            del self._flying[key]


async def owner_status(
    settings: Settings,
    owner_id: str,
    *,
    at: datetime,
    rounds: RoundStore,
    outbox: Outbox,
    marks: Marks,
    live: LiveStatus | None,
    model: str,
    round_elsewhere: bool = False,
) -> Status:
    """The status of one owner from its stores and what the daemon knows (None: not running).

    `round_elsewhere`: a process on the database holds the owner's round lock.

    Raises:
        StoreError: the database cannot be read.
    """
    pause = await Pauses(marks).state(owner_id, at)
    last = await rounds.list(owner_id=owner_id, limit=1)
    pending = await outbox.pending(limit=PENDING_SCAN)
    channels = await stored_channels(settings, owner_id, marks=marks, at=at)
    next_heartbeat = None
    unwatched: tuple[str, ...] = ()
    if live is not None:
        next_heartbeat = live.next_heartbeat
        # With the API on, the session channel is down while no client watches it: that
        # is no failure, and the text says so rather than "down".
        if settings.api.address is not None:
            unwatched = tuple(
                name
                for name, channel in settings.channels.items()
                if isinstance(channel, WebChannelSettings)
                and live.channels.get(name) == "down"
                and channels.get(name) == "ok"
            )
        # The daemon may know more (a channel it cannot reach at all): down either way.
        channels = {
            name: "down" if live.channels.get(name) == "down" else health
            for name, health in channels.items()
        }
    disk = disk_state(settings.database.spill_path)
    counts = live.turns if live is not None else {}
    turns = InFlight(
        rounds=max(counts.get("rounds", 0), int(round_elsewhere)), relay=counts.get("relay", 0)
    )
    # With the API on, the session channel reaches only a client that watches the session.
    only_session = all(isinstance(c, WebChannelSettings) for c in settings.channels.values())
    watched = live is not None and live.watched is True
    unheard = bool(settings.api.listen) and bool(settings.channels) and only_session and not watched
    return Status(
        running=live is not None,
        pause=pause,
        next_heartbeat=next_heartbeat,
        last_round=last[0] if last else None,
        pending_deliveries=sum(1 for d in pending if d.owner_id == owner_id),
        channels=channels,
        model=model,
        disk=disk,
        unwatched=unwatched,
        turns=turns,
        unheard=unheard,
        relay=dict(live.relay) if live is not None else {},
    )


async def gather(settings: Settings, owner_id: str, *, at: datetime) -> Status:
    """Collect the status of one owner from the database, the daemon's socket and the model.

    Raises:
        StoreError: the database cannot be read.
    """
    answer, model = await asyncio.gather(
        ask_status(settings.daemon.socket, owner_id=owner_id, timeout_s=STATUS_TIMEOUT_S),
        model_health(settings.model),
    )
    live = LiveStatus.from_json(answer) if answer is not None else None
    async with open_database(settings.database, write=False) as store:
        return await owner_status(
            settings,
            owner_id,
            at=at,
            rounds=store.rounds,
            outbox=store.outbox,
            marks=store.marks,
            live=live,
            model=model,
            round_elsewhere=await round_running(store.db.engine, owner_id),
        )


def _relay(relay: dict[str, Any]) -> str:
    """The relay's line: its calls since the daemon started, and the last failure's words."""
    calls, failed, last = relay.get("calls", 0), relay.get("failed", 0), relay.get("last_error")
    line = f"{calls} call{'' if calls == 1 else 's'} since the daemon started, {failed} failed"
    return f"{line}; the last: {last}" if failed and last else line


def _turns(turns: InFlight) -> str:
    """The `turns` line: the owner's rounds and relay turns in flight."""
    if not turns.rounds and not turns.relay:
        return "none in flight"
    parts = []
    if turns.rounds:
        parts.append("a round")
    if turns.relay:
        parts.append(f"{turns.relay} relay turn{'s' if turns.relay > 1 else ''}")
    return " and ".join(parts) + " in flight"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _local(value: datetime, tz: ZoneInfo) -> str:
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")
