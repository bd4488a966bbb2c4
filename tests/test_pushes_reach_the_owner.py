"""With a chat app behind the relay, pushes need a way to the owner: `check` and `status` say so.

With the API on, the session channel reaches the owner only while a client
watches the session; a chat front-end behind the relay does not. With no
other channel, pushes have nowhere to go. An Open WebUI Channel's incoming
webhook is one way: its URL works as a webhook channel's as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from backthink.config import Settings
from backthink.host.checks import NOWHERE, _check_channels
from backthink.host.live import LiveStatus
from backthink.host.status import UNHEARD, owner_status
from backthink.models import Urgency
from backthink.records import OutgoingMessage
from backthink.store import SqlStores, open_database

PROMPTS = Path(__file__).resolve().parent.parent / "backthink/prompts"
T0 = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
HOOK = {"type": "webhook", "url": "http://127.0.0.1:8080/api/v1/channels/webhooks/ID/TOKEN"}


def settings(db: Path, *, api: bool, channels: dict[str, Any]) -> Settings:
    return Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "Asia/Shanghai"},
            "prompt": {"dir": str(PROMPTS)},
            "database": {"url": f"sqlite+aiosqlite:///{db}"},
            "api": {"listen": "127.0.0.1:8766" if api else ""},
            "channels": channels,
        }
    )


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[SqlStores]:
    s = settings(tmp_path / "bt.db", api=True, channels={"web": {"type": "web"}})
    async with open_database(s.database) as opened:
        yield opened


@pytest.mark.parametrize(
    ("api", "channels", "warned"),
    [
        (True, {"web": {"type": "web"}}, True),
        (True, {"web": {"type": "web"}, "owui": HOOK}, False),
        (False, {"web": {"type": "web"}}, False),
    ],
)
def test_check_warns_when_pushes_have_nowhere_to_go(
    tmp_path: Path, api: bool, channels: dict[str, Any], warned: bool
) -> None:
    """Only the session channel with the API on: a warning line; any other channel: none."""
    lines = _check_channels(settings(tmp_path / "bt.db", api=api, channels=channels))
    assert [(c.line, c.state) for c in lines if c.line == NOWHERE] == (
        [(NOWHERE, "warn")] if warned else []
    )


async def test_status_says_pushes_have_nowhere_to_go_until_a_client_watches(
    tmp_path: Path, stores: SqlStores
) -> None:
    """The status text has a pushes line while nothing can see a push, and loses it after."""

    async def text(s: Settings, live: LiveStatus | None) -> str:
        found = await owner_status(
            s,
            "o",
            at=T0,
            rounds=stores.rounds,
            outbox=stores.outbox,
            marks=stores.marks,
            live=live,
            model="m",
        )
        return found.render(ZoneInfo("Asia/Shanghai"))

    alone = settings(tmp_path / "bt.db", api=True, channels={"web": {"type": "web"}})
    assert f"pushes      {UNHEARD}" in await text(alone, LiveStatus(watched=False))
    assert "pushes" not in await text(alone, LiveStatus(watched=True))
    hooked = settings(tmp_path / "bt.db", api=True, channels={"web": {"type": "web"}, "o": HOOK})
    assert "pushes" not in await text(hooked, LiveStatus(watched=False))


def test_a_webhook_body_carries_content_for_chat_apps() -> None:
    """The webhook body repeats the text as `content`, the field Open WebUI's Channels read."""
    message = OutgoingMessage(
        round_id="r1",
        owner_id="o",
        persona_id="cyrene",
        persona_name="昔涟",
        text="晚上记得吃点热乎的。",
        urgency=Urgency.ROUTINE,
        created_at=T0,
    )
    body = message.webhook_body()
    assert body["content"] == body["text"] == "晚上记得吃点热乎的。"
