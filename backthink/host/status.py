"""`backthink status`: is the daemon running, is the owner paused, how did the last round end.

Most of the answer is in the database, shared by every process: the pause,
the last round, the pending deliveries, and which channels failed every try
and are down for their cooldown (whichever process tried them). Only the
running daemon knows its next heartbeat (and whether a channel it serves is
connected at all); it answers a status request on its socket. The model
endpoint is probed like `backthink check` does, within a few seconds and
without retries.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from backthink.config import ModelSettings, Settings, WebChannelSettings
from backthink.delivery.dispatcher import CHANNEL_DOWN
from backthink.errors import BackthinkError, ModelNotConfiguredError
from backthink.host.live import LiveStatus
from backthink.host.poke import STATUS_TIMEOUT_S, ask_status
from backthink.ports import Marks, ModelClient, Outbox, RoundStore
from backthink.records import RoundRecord
from backthink.redact import redact_urls
from backthink.round.pause import Pauses, PauseState
from backthink.round.spill import RESERVE_BYTES, Spill
from backthink.store import open_database

MODEL_TIMEOUT_S = 5.0  # seconds the model probe may take at most
PENDING_SCAN = 1000  # pending deliveries counted at most; more than a few means trouble anyway
NOT_CONFIGURED = "not configured"
UNHEARD = (
    "nowhere to go: no client reads the session (GET /v1/events) and there is no other "
    "channel; add one (docs/api.md)"
)
LOW_SPACE_BYTES = RESERVE_BYTES  # bytes free on the database's disk below which it counts as full


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
                ", ".join(f"{name} {health}" for name, health in self.channels.items())
                or "none configured",
            ),
            (
                "model",
                f"{self.model}: set model.base_url, or run `backthink init --detect`"
                if self.model == NOT_CONFIGURED
                else self.model,
            ),
            ("disk", self.disk.describe()),
        ]
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
    from backthink.model.client import OpenAIModelClient

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


async def owner_status(
    settings: Settings,
    owner_id: str,
    *,
    at: datetime,
    rounds: RoundStore,
    outbox: Outbox,
    live: LiveStatus | None,
    model: str,
) -> Status:
    """The status of one owner from its stores and what the daemon knows (None: not running).

    Raises:
        StoreError: the database cannot be read.
    """
    pause = await Pauses(rounds).state(owner_id, at)
    last = await rounds.list(owner_id=owner_id, limit=1)
    pending = await outbox.pending(limit=PENDING_SCAN)
    channels = await stored_channels(settings, owner_id, marks=rounds, at=at)
    next_heartbeat = None
    if live is not None:
        next_heartbeat = live.next_heartbeat
        # The daemon may know more (a channel it cannot reach at all): down either way.
        channels = {
            name: "down" if live.channels.get(name) == "down" else health
            for name, health in channels.items()
        }
    disk = disk_state(settings.database.spill_path)
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
        unheard=unheard,
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
            live=live,
            model=model,
        )


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _local(value: datetime, tz: ZoneInfo) -> str:
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")
