"""The marks and the store sets: one Marks contract over SQL and memory, the row layout kept.

An endpoint's marks were kept under the owner id `*` with a digest of the
endpoint in the name before `EndpointKey` existed; databases hold such rows,
so the layout is pinned here byte for byte.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from backthink.config import ModelSettings, Settings
from backthink.endpoint.learned import SchemaFormMemory
from backthink.models import Message, Outcome
from backthink.ports import EndpointKey
from backthink.records import Delivery, DeliveryStatus, OutgoingMessage, RoundRecord
from backthink.store import SqlMarks, VolatileMarks, VolatileStores, open_store
from backthink.testing import FakeClock
from backthink.tools.offer import ToolOffer

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:8080/v1"
HERE = EndpointKey(URL, "qwen")

AnyMarks = SqlMarks | VolatileMarks
# An endpoint's mark as an earlier version wrote it, an hour before T0.
OLD_ENDPOINT_MARK = "INSERT INTO mark (owner_id, name, at) VALUES ('*', ?, '2026-03-01 11:00:00')"


@pytest.fixture(params=["sql", "memory", "pg"])
async def marks(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyMarks]:
    """Each Marks implementation, empty: SQLite, in memory, PostgreSQL."""
    if request.param == "memory":
        yield VolatileMarks()
        return
    url = (
        request.getfixturevalue("pg_url")
        if request.param == "pg"
        else f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"
    )
    db, _, _ = await open_store(url)
    yield SqlMarks(db)
    await db.dispose()


def old_endpoint_row(prefix: str, base_url: str | None, model: str) -> str:
    """The name an endpoint's mark was stored under, worked out as it always was."""
    return prefix + ":" + hashlib.sha256(f"{base_url}\n{model}".encode()).hexdigest()[:16]


async def test_a_mark_is_none_until_set_then_its_latest_instant(marks: AnyMarks) -> None:
    """A mark reads None, then the instant last set, in UTC, whatever zone it was given in."""
    assert await marks.marked_at("ana", "paused_until") is None
    await marks.mark("ana", "paused_until", T0)
    later = T0.astimezone(timezone(timedelta(hours=8))) + timedelta(hours=1)
    await marks.mark("ana", "paused_until", later)
    at = await marks.marked_at("ana", "paused_until")
    assert at == T0 + timedelta(hours=1) and at is not None and at.utcoffset() == timedelta(0)


async def test_a_cleared_mark_reads_none_and_leaves_the_others(marks: AnyMarks) -> None:
    """Clearing a mark removes it alone; clearing one never set changes nothing."""
    await marks.mark("ana", "startup_greeting", T0)
    await marks.mark("ana", "paused_until", T0)
    await marks.clear("ana", "startup_greeting")
    await marks.clear("bo", "startup_greeting")
    assert await marks.marked_at("ana", "startup_greeting") is None
    assert await marks.marked_at("ana", "paused_until") == T0


async def test_owners_and_endpoints_keep_marks_apart(marks: AnyMarks) -> None:
    """One name under an owner, an endpoint, another model or address: four separate marks."""
    await marks.mark("ana", "tools_refused", T0)
    await marks.mark(HERE, "tools_refused", T0 + timedelta(minutes=1))
    assert await marks.marked_at("bo", "tools_refused") is None
    assert await marks.marked_at(EndpointKey(URL, "llama"), "tools_refused") is None
    assert await marks.marked_at(EndpointKey(None, "qwen"), "tools_refused") is None
    assert await marks.marked_at(HERE, "schema_form_refused") is None
    assert await marks.marked_at(HERE, "tools_refused") == T0 + timedelta(minutes=1)
    assert await marks.marked_at("ana", "tools_refused") == T0


async def test_an_endpoint_mark_keeps_the_row_layout_databases_hold(tmp_path: Path) -> None:
    """A mark of an endpoint is the row ('*', 'name:<16 hex of url and model>'), both ways."""
    path = tmp_path / "bt.db"
    db, _, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    try:
        await SqlMarks(db).mark(HERE, "schema_form_refused", T0)
        # A row an earlier version wrote, read through the key.
        with sqlite3.connect(path) as raw:
            raw.execute(
                OLD_ENDPOINT_MARK,
                (old_endpoint_row("tools_refused", URL, "qwen"),),
            )
            rows = raw.execute("SELECT owner_id, name FROM mark ORDER BY name").fetchall()
        assert ("*", old_endpoint_row("schema_form_refused", URL, "qwen")) in rows
        assert await SqlMarks(db).marked_at(HERE, "tools_refused") == T0 - timedelta(hours=1)
    finally:
        await db.dispose()


async def test_refusals_learned_before_still_hold(tmp_path: Path) -> None:
    """The tools refusal and the older schema form, stored by an earlier version, are honoured."""
    path = tmp_path / "bt.db"
    db, _, _ = await open_store(f"sqlite+aiosqlite:///{path}")
    model = ModelSettings(base_url=URL, name="qwen")
    with sqlite3.connect(path) as raw:
        for prefix in ("tools_refused", "schema_form_refused"):
            raw.execute(
                OLD_ENDPOINT_MARK,
                (old_endpoint_row(prefix, URL, "qwen"),),
            )
    try:
        clock, marks = FakeClock(T0), SqlMarks(db)
        settings = Settings.model_validate({"model": model.model_dump()})
        offer = ToolOffer(
            settings, clock=clock, connected=list, rounds=None, memories=None, marks=marks
        )
        assert await offer.refused()
        assert await SchemaFormMemory(model, marks, clock).older_form()
        elsewhere = model.model_copy(update={"name": "llama"})
        assert not await SchemaFormMemory(elsewhere, marks, clock).older_form()
    finally:
        await db.dispose()


def delivered(round_id: str, text: str) -> tuple[Delivery, Message]:
    """A sent delivery of ana's and its write-back message."""
    message = OutgoingMessage(
        round_id=round_id, owner_id="ana", persona_id="p", text=text, created_at=T0
    )
    delivery = Delivery(
        id=round_id,
        owner_id="ana",
        channel="web",
        message=message,
        status=DeliveryStatus.SENT,
        attempts=1,
        created_at=T0,
        updated_at=T0,
        trigger="cron",
    )
    writeback = Message(
        owner_id="ana", role="assistant", text=text, origin="proactive", created_at=T0
    )
    return delivery, writeback


async def test_volatile_stores_share_one_state() -> None:
    """The outbox writes back into the set's session and asks the set's rounds what is recorded."""
    stores = VolatileStores.empty()
    assert await stores.outbox.commit(*delivered("r1", "hi"))
    assert [m.text for m in await stores.messages.recent("ana", 5)] == ["hi"]
    assert [d.id for d in await stores.outbox.unrecorded(since=T0)] == ["r1"]
    await stores.rounds.save(
        RoundRecord(
            id="r1",
            owner_id="ana",
            trigger="cron",
            started_at=T0,
            finished_at=T0,
            outcome=Outcome.DELIVERED,
            reason="web",
        )
    )
    assert await stores.outbox.unrecorded(since=T0) == []


async def test_a_set_around_a_seeded_session_writes_back_into_it() -> None:
    """VolatileStores.empty(messages) is built around that session: pushes land beside the seed."""
    seeded = VolatileStores.empty().messages
    await seeded.add(Message(owner_id="ana", role="user", text="早", created_at=T0))
    stores = VolatileStores.empty(seeded)
    assert await stores.outbox.commit(*delivered("r1", "早安"))
    assert [m.text for m in await seeded.recent("ana", 5)] == ["早", "早安"]
