"""The page in a real browser: `backthink run` with [web] on, loaded in headless Chromium.

The database holds the scripted day (tests/support/scripted_day.py: rounds at fixed
times on Monday 30 November 2026, Shanghai), so the day's page is the same
whatever the wall clock says; the rounds the tests add themselves are poked
into the running daemon against the local fake endpoint and looked at by id.
A screenshot of the day is kept under var/artefacts/ (the README's picture).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, ROOT, DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from support.scripted_day import OWNER, run_day
from support.webdriver import Browser, WebDriverError, browser, missing

from backthink.models import Outcome
from backthink.records import RoundRecord
from backthink.testing import run_cli
from backthink.web.words import reason_words

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(180)]

DAY = "2026-11-30"  # the scripted day, in the owner's time zone
ARTEFACTS = Path(os.environ.get("BACKTHINK_ARTEFACTS", ROOT / "var/artefacts"))
XSS_REPLY = (
    "想一想 <script>alert(3)</script>\n[我决定:push]\n[紧急:routine]\n"
    '<script>alert(1)</script><img src=x onerror="alert(2)"> 晚安'
)


@dataclass
class Site:
    """The running daemon, its page's address and the scripted day it shows."""

    workdir: Workdir
    env: dict[str, str]
    url: str
    day: list[RoundRecord]

    def poke(self, trigger: str) -> dict[str, object]:
        proc = run_cli(
            self.workdir.config,
            "poke",
            trigger,
            cwd=self.workdir.path,
            env=self.env,
            timeout_s=CLI_TIMEOUT_S,
        )
        answer: dict[str, object] = json.loads(proc.stdout)
        return answer


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fake_server: FakeOpenAI) -> Iterator[Site]:
    """The scripted day in a database, and the daemon serving its page on a free port."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    path = tmp_path_factory.mktemp("web")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
    env.update(
        BACKTHINK_MODEL__BASE_URL=fake_server.base_url,
        BACKTHINK_MODEL__API_KEY="sk-test-secret-0123456789",
        BACKTHINK_MODEL__NAME="fake-model",
        BACKTHINK_MODEL__MAX_RETRIES="0",
        BACKTHINK_MODEL__TIMEOUT_S="5",
    )
    workdir = Workdir(path, env)
    # Quiet hours as the scripted day had them, so the timeline draws their bands.
    workdir.write_config(gate={"quiet_hours": "23:00-07:00", "default_channel": "web"})
    records = asyncio.run(run_day(f"sqlite+aiosqlite:///{path / 'bt.db'}"))
    daemon_env = dict(
        env,
        BACKTHINK_OWNER__ID=OWNER,
        BACKTHINK_SCHEDULE__HEARTBEAT="24h",
        BACKTHINK_SCHEDULE__QUIET_HEARTBEAT="24h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
        BACKTHINK_DAEMON__SOCKET=str(path / "bt.sock"),
        BACKTHINK_WEB__LISTEN="127.0.0.1:0",
    )
    fake_server.reset()
    daemon = DaemonProcess(workdir, daemon_env)
    try:
        ready = daemon.wait_for("web.ready")
        daemon.wait_for("daemon.ready")
        url = str(ready["url"])
        yield Site(workdir, daemon_env, url, [r for r in records if r.owner_id == OWNER])
    finally:
        assert daemon.stop() == 0, "".join(daemon.raw)


@pytest.fixture(scope="module")
def chromium(site: Site) -> Iterator[Browser]:
    """One headless Chromium for the module's tests."""
    with browser() as b:
        yield b


def test_timeline_marks_each_round_by_outcome(site: Site, chromium: Browser) -> None:
    """The day's timeline has one mark per round, coloured by outcome, deliveries labelled."""
    chromium.resize(1280, 900)
    chromium.get(f"{site.url}day/{DAY}")
    expected = Counter(r.outcome.value for r in site.day)
    assert set(expected) == {o.value for o in Outcome}, "the scripted day has every outcome"
    for outcome in Outcome:
        marks = chromium.find_all(f'svg a.mark[data-outcome="{outcome.value}"]')
        assert len(marks) == expected[outcome.value], outcome
        shown = chromium.find(f'.legend b[data-count="{outcome.value}"]').text
        assert shown == str(expected[outcome.value])
    labels = sorted(e.text for e in chromium.find_all("svg text.label"))
    delivered = sorted(r.channel or "" for r in site.day if r.outcome is Outcome.DELIVERED)
    assert labels == delivered
    # Quiet hours 23:00-07:00 cross midnight: this morning's end and tonight's start.
    assert len(chromium.find_all("svg rect.quiet")) == 2
    # The owner wrote at 08:00, 08:20 and 20:00: three bands of the activity window.
    assert len(chromium.find_all("svg rect.owner")) == 3
    links = {m.attribute("href") for m in chromium.find_all("svg a.mark")}
    assert links == {f"/rounds/{r.id}" for r in site.day}
    chromium.screenshot(ARTEFACTS / "page.png")


def test_earlier_days_are_one_click_away(site: Site, chromium: Browser) -> None:
    """The previous-day link leads to that day's page, which has none of these rounds."""
    chromium.get(f"{site.url}day/{DAY}")
    chromium.find('a[rel="prev"]').click()
    assert chromium.url.endswith("/day/2026-11-29")
    assert chromium.find_all("svg a.mark") == []


def test_round_detail_shows_the_reason_in_words(site: Site, chromium: Browser) -> None:
    """Clicking a round in the day's list opens its detail with the gate's reason in words."""
    target = next(r for r in site.day if r.reason == "min_interval")
    chromium.get(f"{site.url}day/{DAY}")
    chromium.find(f'table.rounds a[href="/rounds/{target.id}"]').click()
    assert chromium.url.endswith(f"/rounds/{target.id}")
    assert chromium.find("#outcome").text == "suppressed / min_interval"
    assert chromium.find("#reason-words").text == reason_words(Outcome.SUPPRESSED, "min_interval")
    assert "组会加油" in chromium.find("pre.body").text
    assert chromium.find("pre.footer").text.startswith("[我决定:push]")


def wait_for_status(page: Browser, state: str, timeout_s: float = 15.0) -> None:
    """Wait for the page the form's redirect leads to: until then the old page's status shows."""
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        try:
            seen = page.find("#status").attribute("class") or ""
        except WebDriverError:  # the old page's element went stale while the new one loads
            seen = ""
        if state in seen:
            return
        time.sleep(0.1)
    raise AssertionError(f"the status never showed {state!r} (last seen: {seen!r})")


def test_pause_from_the_page_without_javascript(site: Site) -> None:
    """With scripts off, the Pause button makes the next round skipped/disabled; Resume ends it."""
    with browser(javascript=False) as page:
        page.get(site.url)
        assert "running" in (page.find("#status").attribute("class") or "")
        page.find("#pause").click()
        wait_for_status(page, "paused")
        answer = site.poke("paused from the page")
        assert (answer["outcome"], answer["reason"]) == ("skipped", "disabled")
        page.find("#resume").click()
        wait_for_status(page, "running")
    answer = site.poke("resumed from the page")
    assert answer["reason"] != "disabled"


def test_untrusted_reply_renders_as_text(
    site: Site, chromium: Browser, fake_server: FakeOpenAI
) -> None:
    """A reply and a trigger carrying <script> and <img onerror> show as text; nothing runs."""
    fake_server.reset()
    fake_server.script(XSS_REPLY)
    answer = site.poke("<b>poke</b><script>alert(4)</script>")
    round_id = str(answer["round_id"])
    chromium.get(f"{site.url}rounds/{round_id}")
    assert chromium.find_all("main script") == []
    assert chromium.find_all("main img") == []
    assert [b.attribute("id") for b in chromium.find_all("main b")] == ["outcome"]
    assert not chromium.alert_open()
    assert (
        '<script>alert(1)</script><img src=x onerror="alert(2)">' in chromium.find("pre.body").text
    )
    assert "<script>alert(3)</script>" in chromium.find("pre.thinking").text
    facts = chromium.find("main dl").text
    assert "<b>poke</b><script>alert(4)</script>" in facts
    assert re.search(r"\d\d:\d\d", facts)
