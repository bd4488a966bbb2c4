"""The page without a browser: its access rules, escaping, day layout, forms and JSON, in process.

The Starlette application is driven through httpx's ASGI transport over
in-memory stores and a FakeClock, so nothing here depends on the wall clock
or on a free port. The browser tests (test_web_browser.py) cover the rest.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx2
import pytest
from conftest import ROOT, Workdir
from support.settings import BARE, make_settings

from backthink.config import QuietHours, Settings, split_listen
from backthink.errors import ConfigError
from backthink.host.app import App, AppOverrides, build_app
from backthink.host.status import Status
from backthink.models import Memory, MemoryKind, Message, Outcome, Reason
from backthink.ports import MessageStore, RoundStore
from backthink.records import RoundRecord
from backthink.store import VolatileMessageStore, VolatileRoundStore, VolatileStores, open_store
from backthink.testing import FakeClock, RecordingChannel, ScriptedModel
from backthink.web import build_asgi
from backthink.web.day import day_bounds, lay_out
from backthink.web.guard import COOKIE
from backthink.web.words import esc, reason_words

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
HERE = "http://127.0.0.1:8765"
TOKEN = "correct-horse-battery-staple"


def settings(**web: object) -> Settings:
    return make_settings(
        base=BARE,
        state={"file": None},
        gate={"quiet_hours": "23:00-07:00", "min_interval": "0s"},
        channels={"web": {"type": "web"}, "phone": {"type": "webhook", "url": HERE}},
        web={"listen": "127.0.0.1:8765", **web},
        # Every heartbeat asks the model here; skipping unchanged ones is test_unchanged.py's.
        schedule={"skip_unchanged": False},
    )


def make_app(s: Settings, model: ScriptedModel | None = None) -> App:
    return build_app(
        s,
        VolatileStores.empty(),
        AppOverrides(
            model=model or ScriptedModel(),
            clock=FakeClock(NOW),
            persona_prompt="你是昔涟。",
            channels={"phone": RecordingChannel("phone")},
        ),
    )


async def client_for(app: App) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=build_asgi(app, "o"))
    return httpx2.AsyncClient(transport=transport, base_url=HERE)


@pytest.fixture
async def open_page() -> AsyncIterator[tuple[App, httpx2.AsyncClient]]:
    app = make_app(settings())
    async with await client_for(app) as client:
        yield app, client


def test_every_reason_has_words() -> None:
    """Each reason code of every outcome has its own sentence on the page."""
    unknown = reason_words(Outcome.FAILED, "no-such-reason")
    for outcome in Outcome:
        for reason in Reason:
            assert reason_words(outcome, reason.value) != unknown, (outcome, reason)
    assert "phone" in reason_words(Outcome.DELIVERED, "phone")


def test_esc_makes_markup_text() -> None:
    """Escaping turns markup and quotes into text, safe in content and attributes."""
    assert esc("<script>\"x\"&'y'</script>") == (
        "&lt;script&gt;&quot;x&quot;&amp;&#x27;y&#x27;&lt;/script&gt;"
    )
    assert esc(None) == ""


@pytest.mark.parametrize(
    ("quiet", "spans"),
    [("23:00-07:00", [(0.0, 291.67), (958.33, 1000.0)]), ("13:00-14:00", [(541.67, 583.33)])],
)
def test_quiet_hours_bands(quiet: str, spans: list[tuple[float, float]]) -> None:
    """Quiet hours that cross midnight are two bands of the day, others one."""
    line = lay_out(
        date(2026, 11, 30),
        ZoneInfo("Asia/Shanghai"),
        rounds=[],
        owner_messages=[],
        quiet=QuietHours.parse(quiet),
        activity_window=timedelta(minutes=10),
    )
    assert [(s.x0, s.x1) for s in line.quiet] == spans


def test_day_is_the_owners_local_day_even_when_it_has_25_hours() -> None:
    """A day is local midnight to midnight; on a 25-hour day noon lies at 13/25 of it."""
    tz = ZoneInfo("America/New_York")
    day = date(2026, 11, 1)  # summer time ends at 02:00
    start, end = day_bounds(day, tz)
    assert end - start == timedelta(hours=25)
    noon = datetime.combine(day, time(12), tzinfo=tz)
    record = RoundRecord(
        id="r",
        owner_id="o",
        trigger="heartbeat",
        started_at=noon,
        finished_at=noon,
        outcome=Outcome.SUPPRESSED,
        reason="no_push",
    )
    owner = Message(owner_id="o", role="user", text="hi", created_at=noon)
    line = lay_out(
        day,
        tz,
        rounds=[record],
        owner_messages=[owner, owner],
        quiet=None,
        activity_window=timedelta(minutes=30),
    )
    assert line.marks[0].x == 520.0
    assert [(s.x0, s.x1) for s in line.owner] == [(520.0, 540.0)]
    assert line.quiet == []


async def _stores(kind: str, tmp_path: Path) -> tuple[MessageStore, RoundStore, Any]:
    if kind == "memory":
        return VolatileMessageStore(), VolatileRoundStore(), None
    db, messages, rounds = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}")
    return messages, rounds, db


@pytest.mark.parametrize("kind", ["memory", "sql"])
async def test_stores_read_a_day(kind: str, tmp_path: Path) -> None:
    """Both stores return one owner's rounds and messages of [start, end), oldest first."""
    messages, rounds, db = await _stores(kind, tmp_path)
    try:
        start = NOW
        for i, minutes in enumerate([-1, 0, 30, 59, 60]):
            at = start + timedelta(minutes=minutes)
            await rounds.save(
                RoundRecord(
                    id=f"r{i}",
                    owner_id="o",
                    trigger="heartbeat",
                    started_at=at,
                    finished_at=at,
                    outcome=Outcome.SUPPRESSED,
                    reason="no_push",
                )
            )
            await messages.add(Message(owner_id="o", role="user", text=f"m{i}", created_at=at))
            await messages.add(Message(owner_id="o", role="assistant", text="a", created_at=at))
        await rounds.save(
            RoundRecord(
                id="other",
                owner_id="x",
                trigger="heartbeat",
                started_at=start,
                finished_at=start,
                outcome=Outcome.SUPPRESSED,
                reason="no_push",
            )
        )
        end = start + timedelta(hours=1)
        found = await rounds.started_between("o", start, end)
        assert [r.id for r in found] == ["r1", "r2", "r3"]
        assert [r.id for r in await rounds.started_between("o", start, end, limit=2)] == [
            "r1",
            "r2",
        ]
        said = await messages.between("o", start, end, role="user")
        assert [m.text for m in said] == ["m1", "m2", "m3"]
        assert len(await messages.between("o", start, end)) == 6
    finally:
        if db is not None:
            await db.dispose()


def test_listen_address_is_checked() -> None:
    """`web.listen` is HOST:PORT; beyond loopback it needs a token, on loopback it does not."""
    assert split_listen("[::1]:8765") == ("::1", 8765)
    with pytest.raises(ValueError, match="HOST:PORT"):
        split_listen("localhost")
    settings(listen="127.0.0.1:8765").web.check_serving()
    settings(listen="0.0.0.0:8765", token=TOKEN).web.check_serving()
    with pytest.raises(ConfigError, match=r"web\.token"):
        settings(listen="0.0.0.0:8765").web.check_serving()
    with pytest.raises(ConfigError, match=r"web\.token"):
        settings(listen="192.168.1.5:8765", token="").web.check_serving()


def test_run_refuses_a_public_page_without_a_token(workdir: Workdir) -> None:
    """`backthink run` with a non-loopback listen and no token exits 2 with one clear line."""
    workdir.env["BACKTHINK_WEB__LISTEN"] = "0.0.0.0:8765"
    proc = workdir.cli("run", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "web.token" in lines[0], proc.stderr


def test_daemon_without_web_does_not_import_the_page() -> None:
    """With [web] off, importing (and so running) the daemon loads no page module nor uvicorn."""
    code = (
        "import sys, backthink.host.daemon, backthink.cli.root\n"
        "print(sorted(m for m in sys.modules if m.startswith(('backthink.web', 'uvicorn'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"


async def test_loopback_page_refuses_other_hosts_and_foreign_posts(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """Without a token: only loopback host names; a POST must come from the page itself."""
    app, client = open_page
    assert (await client.get("/")).status_code == 200
    assert (await client.get("/", headers={"host": "localhost:8765"})).status_code == 200
    # A site that rebinds its own name to 127.0.0.1 gets nothing.
    assert (await client.get("/", headers={"host": "evil.example:8765"})).status_code == 403
    assert (await client.post("/pause")).status_code == 403
    foreign = await client.post("/pause", headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert not (await app.pauses.state("o", NOW)).paused
    ok = await client.post("/pause", headers={"referer": f"{HERE}/day/2026-11-30"})
    assert (ok.status_code, ok.headers["location"]) == (303, "/")
    assert (await app.pauses.state("o", NOW)).paused


async def test_token_by_cookie_or_bearer() -> None:
    """With a token: `/?token=` sets a derived cookie; cookie or bearer opens every page."""
    app = make_app(settings(listen="0.0.0.0:8765", token=TOKEN))
    async with await client_for(app) as client:
        assert (await client.get("/")).status_code == 401
        assert (await client.get("/api/status")).status_code == 401
        assert (await client.get("/?token=wrong")).status_code == 401
        login = await client.get(f"/?token={TOKEN}")
        assert (login.status_code, login.headers["location"]) == (303, "/")
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        value = client.cookies[COOKIE]
        assert (await client.get("/memory")).status_code == 200
        client.cookies.clear()
        client.cookies.set(COOKIE, value + "x")
        assert (await client.get("/memory")).status_code == 401
        client.cookies.clear()
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/api/rounds", headers=bearer)).status_code == 200
        # A script with the token needs no Origin; a browser's cookie alone does.
        assert (await client.post("/pause", headers=bearer)).status_code == 303
        client.cookies.set(COOKIE, value)
        assert (await client.post("/resume")).status_code == 403
        assert (await client.post("/resume", headers={"origin": HERE})).status_code == 303


async def test_pages_escape_and_explain_a_round(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """A round's page shows its reply split and escaped, the reason in words, the request."""
    app, client = open_page
    model = app.model
    assert isinstance(model, ScriptedModel)
    model.push(
        "<think>先想想 <b>粗</b></think>也许说点什么\n[我决定:push]\n[紧急:warning]\n"
        "<script>alert(1)</script>早点休息"
    )
    record = await app.thinker.run_round("o", "<i>heartbeat</i>")
    page = (await client.get(f"/rounds/{record.id}")).text
    assert "<script>" not in page and "<i>" not in page and "<b>粗" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;早点休息" in page
    assert "&lt;i&gt;heartbeat&lt;/i&gt;" in page
    assert '<pre class="footer">[我决定:push]\n[紧急:warning]</pre>' in page
    assert esc(reason_words(record.outcome, record.reason)) in page
    assert "think --dry-run" in page and "--- 1 system ---" in page
    day = (await client.get("/day/2026-11-30")).text
    assert f'href="/rounds/{record.id}"' in day and "<script>alert" not in day
    assert (await client.get("/rounds/nope")).status_code == 404
    assert (await client.get("/day/yesterday")).status_code == 404


async def test_delivered_round_shows_its_delivery(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """A delivered round's page lists its delivery: channel, status, attempts."""
    app, client = open_page
    model = app.model
    assert isinstance(model, ScriptedModel)
    model.push("[decision:push]\n[channel:phone]\n[urgency:warning]\n十点组会，别忘了带电脑。")
    record = await app.thinker.run_round("o", "heartbeat")
    assert record.outcome is Outcome.DELIVERED, record
    page = (await client.get(f"/rounds/{record.id}")).text
    assert "<dt>status</dt><dd>sent</dd>" in page and "<dt>attempts</dt><dd>1</dd>" in page
    day = (await client.get("/")).text
    assert '<text class="label"' in day and ">phone</text>" in day


async def test_round_page_shows_what_it_recalled_until_it_is_forgotten(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """A round's page lists the thoughts and memories its prompt showed, by id, as they are now."""
    app, client = open_page
    model = app.model
    assert isinstance(model, ScriptedModel)
    model.push("她上午在写<论文>，先不打扰。\n[我决定:no_push]", "[我决定:no_push]")
    await app.thinker.run_round("o", "heartbeat")
    record = await app.thinker.run_round("o", "heartbeat")
    [thought] = await app.memories.list("o", kind=MemoryKind.THOUGHT, limit=1)
    assert thought.id is not None and [r.id for r in record.recalled] == [thought.id]
    page = (await client.get(f"/rounds/{record.id}")).text
    assert f"earlier thought #{thought.id}: <q>她上午在写&lt;论文&gt;，先不打扰。</q>" in page
    await app.memories.forget("o", thought.id)
    page = (await client.get(f"/rounds/{record.id}")).text
    assert "论文" not in page and "(forgotten since)" in page


async def test_memory_page_forgets(open_page: tuple[App, httpx2.AsyncClient]) -> None:
    """The memory page lists thoughts and memories; a forget button removes one."""
    app, client = open_page
    kept = await app.memories.add(
        Memory(
            owner_id="o",
            kind=MemoryKind.NOTE,
            text="<u>sister</u> recital Saturday",
            created_at=NOW,
            source="cli",
        )
    )
    await app.memories.add(
        Memory(owner_id="o", kind=MemoryKind.THOUGHT, text="想她", created_at=NOW, source="x")
    )
    page = (await client.get("/memory")).text
    assert "&lt;u&gt;sister&lt;/u&gt;" in page and "想她" in page
    assert f'action="/memory/{kept.id}/forget"' in page
    gone = await client.post(f"/memory/{kept.id}/forget", headers={"origin": HERE})
    assert (gone.status_code, gone.headers["location"]) == (303, "/memory")
    assert "sister" not in (await client.get("/memory")).text
    again = await client.post(f"/memory/{kept.id}/forget", headers={"origin": HERE})
    assert again.status_code == 404


async def test_api_speaks_the_command_lines_json(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """/api/status has the `status --json` keys; /api/rounds the `rounds --json` objects."""
    app, client = open_page
    record = await app.thinker.run_round("o", "heartbeat")
    status = (await client.get("/api/status")).json()
    empty = Status(False, (await app.pauses.state("o", NOW)), None, None, 0).to_json()
    assert set(status) == set(empty)
    assert status["running"] is True and status["last_round"]["outcome"] == record.outcome.value
    rounds = (await client.get("/api/rounds?day=2026-11-30")).json()
    assert rounds == [record.summary()]
    assert (await client.get("/api/rounds?day=2026-11-29")).json() == []
    assert (await client.get("/api/rounds?limit=x")).status_code == 400
    pause = await client.post("/pause", content=b"for=2h", headers={"origin": HERE})
    assert pause.status_code == 303
    until = (await client.get("/api/status")).json()["paused_until"]
    assert until == (NOW + timedelta(hours=2)).isoformat()
    bad = await client.post("/pause", content=b"for=forever", headers={"origin": HERE})
    assert bad.status_code == 400


async def test_pages_send_a_strict_content_policy(
    open_page: tuple[App, httpx2.AsyncClient],
) -> None:
    """Every response forbids inline scripts and framing, even a refusal."""
    _, client = open_page
    for response in (await client.get("/"), await client.post("/pause")):
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_run_says_when_the_page_cannot_listen(workdir: Workdir) -> None:
    """A `web.listen` address already taken stops `run` with one line naming the key (exit 1)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        workdir.env["BACKTHINK_WEB__LISTEN"] = f"127.0.0.1:{port}"
        workdir.env["BACKTHINK_DAEMON__SOCKET"] = str(workdir.path / "bt.sock")
        workdir.env["BACKTHINK_SCHEDULE__STARTUP_GREETING"] = "false"
        proc = workdir.cli("run", check=False)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("backthink:")]
    assert errors == [
        f"backthink: web.listen '127.0.0.1:{port}': cannot listen: Address already in use"
    ], proc.stderr


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01", "9999-12-30", "0001-01-02"])
async def test_the_first_and_last_days_are_not_found(
    open_page: tuple[App, httpx2.AsyncClient], day: str
) -> None:
    """A day at the ends of the calendar is a 404 page and a 400 answer, never a 500."""
    _, client = open_page
    page = await client.get(f"/day/{day}")
    assert page.status_code == 404 and "No such day" in page.text
    api = await client.get(f"/api/rounds?day={day}")
    assert api.status_code == 400 and "day runs from" in api.json()["error"]
    assert (await client.get("/day/9999-12-29")).status_code == 200
    assert (await client.get("/api/rounds?day=0001-01-03")).status_code == 200


async def test_a_round_page_starts_no_server_and_shows_what_the_round_offered(
    tmp_path: Path,
) -> None:
    """Eight views of a round's page start no MCP server; the offered tools come from its record."""
    starts = tmp_path / "starts.log"
    calendar = ROOT / "tests" / "support" / "mcp_calendar.py"
    counting = (
        f"import runpy, sys; open({str(starts)!r}, 'a').write('started\\n'); "
        f"sys.argv = [{str(calendar)!r}]; runpy.run_path({str(calendar)!r}, run_name='__main__')"
    )
    s = make_settings(
        base=BARE,
        state={"file": None},
        tools={"max_chars": 100_000, "mcp": {"cal": {"command": [sys.executable, "-c", counting]}}},
    )
    app = make_app(s, ScriptedModel("[我决定:no_push]"))
    record = await app.thinker.run_round("o", "heartbeat")
    assert starts.read_text().count("started") == 1
    assert "cal__agenda_for" in record.offered and "memory_search" in record.offered
    async with await client_for(app) as client:
        pages = await asyncio.gather(*(client.get(f"/rounds/{record.id}") for _ in range(8)))
    assert all(page.status_code == 200 for page in pages)
    assert starts.read_text().count("started") == 1
    page = pages[0].text
    assert "<code>cal__agenda_for</code>" in page
    assert "a page view starts no server" in page and "tool: memory_search" in page
    assert "tool: cal__" not in page
