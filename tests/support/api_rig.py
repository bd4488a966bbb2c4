"""The doors in the test's own event loop, over a real SQLite file and the fake endpoint.

The doors run in the test's loop, as they run in the daemon's, over a fleet
opened from settings with a FakeClock, so presence windows and message times
never depend on the wall clock.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import openai

from backthink.api import ApiDoors, open_api
from backthink.config import Settings
from backthink.delivery.audience import Audience
from backthink.delivery.dispatcher import Handoff
from backthink.host.app import AppOverrides
from backthink.host.fleet import Fleet, open_fleet
from backthink.host.live import LiveStatus
from backthink.models import Decision
from backthink.testing import FakeClock
from support.fake_openai import FakeOpenAI
from support.settings import BARE, make_settings, merged

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
WAIT_S = 10.0  # seconds any awaited answer may take on a loaded machine


def api_settings(tmp_path: Path, fake: FakeOpenAI, **sections: Any) -> Settings:
    """Two owners (o in Shanghai, p in Berlin), the fake as model and upstream, [api] on.

    `sections` are laid over these, key by key.
    """
    doors = {
        "owners": {"p": {"timezone": "Europe/Berlin"}},
        "persona": {"id": "cyrene"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"},
        "model": {
            "base_url": fake.base_url,
            "api_key": "sk-upstream-key",
            "max_retries": 0,
            "timeout_s": 5,
        },
        "state": {"file": None},
        "api": {"listen": "127.0.0.1:0"},
        "channels": {"web": {"type": "web"}},
    }
    return make_settings(base=merged(BARE, doors), **sections)


@dataclass
class Rig:
    """The open doors, their fleet and clock, and each owner's token."""

    fleet: Fleet
    doors: ApiDoors
    clock: FakeClock
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.doors.url.rstrip("/")

    def client(self, owner: str | None = "o", **headers: str) -> httpx2.AsyncClient:
        """An HTTP client of `owner` (None: no token)."""
        auth = {"authorization": f"Bearer {self.tokens[owner]}"} if owner else {}
        return httpx2.AsyncClient(base_url=self.url, headers={**auth, **headers}, timeout=WAIT_S)

    def sdk(self, owner: str = "o") -> openai.AsyncOpenAI:
        """The openai SDK pointed at the relay with `owner`'s token."""
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=self.tokens[owner], max_retries=0, timeout=WAIT_S
        )

    async def push(self, text: str, *, owner: str = "o", channel: str = "web") -> None:
        """A delivered push, through the owner's own dispatcher (outbox, write-back, stream)."""
        app = await self.fleet.app(owner)
        await app.dispatcher.hand_over(
            Handoff(
                round_id=uuid.uuid4().hex,
                owner_id=owner,
                trigger="heartbeat",
                decision=Decision(push=True, body=text),
                channel=channel,
                at=self.clock.now(),
            )
        )


@asynccontextmanager
async def open_rig(
    tmp_path: Path,
    fake: FakeOpenAI,
    *,
    tokens: bool = True,
    keepalive_s: float = 0.2,
    max_answer_bytes: int | None = None,
    **sections: Any,
) -> AsyncIterator[Rig]:
    """Open the fleet and the doors; with `tokens`, o and p get one each (else the API is open)."""
    settings = api_settings(tmp_path, fake, **sections)
    clock = FakeClock(NOW)
    audience = Audience(settings.api.seen_window)
    async with open_fleet(settings, AppOverrides(clock=clock, audience=audience)) as fleet:
        issued = {o: await fleet.tokens.issue(o, at=NOW) for o in ("o", "p")} if tokens else {}
        bound = {"max_answer_bytes": max_answer_bytes} if max_answer_bytes else {}
        doors = await open_api(
            fleet, ["o", "p"], lambda _: LiveStatus(), keepalive_s=keepalive_s, **bound
        )
        try:
            yield Rig(fleet, doors, clock, issued)
        finally:
            await doors.stop()


async def texts(client: httpx2.AsyncClient, **params: object) -> list[str]:
    """The texts of GET /v1/messages, oldest first."""
    answer = await client.get("/v1/messages", params=params)
    assert answer.status_code == 200, answer.text
    return [m["text"] for m in answer.json()["messages"]]


async def next_push(lines: AsyncIterator[str]) -> dict[str, Any]:
    """The data of the next `event: push` on a raw stream, skipping comments and keep-alives."""
    async with asyncio.timeout(WAIT_S):
        event = None
        async for line in lines:
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "push":
                data: dict[str, Any] = json.loads(line.partition(":")[2])
                return data
    raise AssertionError("the stream ended")
