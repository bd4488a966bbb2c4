"""The distributed worker: real PostgreSQL, real worker processes, one killed mid-round.

300 owners at a 10 s heartbeat, three `backthink worker` processes, the fake
endpoint taking most of a second a reply. One worker is killed with SIGKILL
while rounds are in flight; the others take over its owners and re-run its
cut-off rounds. At the end every owner has been greeted once, and each owner's
heartbeat slots are recorded once each, one heartbeat apart, none missing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ROOT
from support.fake_openai import FakeOpenAI
from support.fake_script import Reply

from backthink.config import Settings
from backthink.host.queue import STALLED_S
from backthink.records import RoundRecord
from backthink.round.recorder import SLOT_NOTE
from backthink.store import open_database

OWNERS = 300
HEARTBEAT_S = 10
WORKERS = 3
REPLY_DELAY_S = 0.8
RUN_S = 40.0  # seconds the workers run before the kill... and after it
NO_PUSH = "[我决定:no_push]"


def write_config(path: Path, url: str, base_url: str) -> Path:
    owners = "\n".join(f'[owners.w{i:03d}]\ntimezone = "UTC"\n' for i in range(OWNERS))
    config = path / "backthink.toml"
    config.write_text(
        f"""
[persona]
id = "cyrene"
name = "昔涟"
prompt_file = ""

[model]
base_url = "{base_url}"
api_key = "sk-test"
name = "fake-model"
# The fake endpoint shares the test's process: under a loaded suite a connection may
# drop, and a real client retries that too.
max_retries = 2
timeout_s = 20

[database]
url = "{url}"

[prompt]
dir = "{ROOT / "backthink/prompts"}"

[state]
file = ""

[schedule]
heartbeat = "{HEARTBEAT_S}s"
jitter = "0s"
startup_greeting = true
startup_cooldown = "1h"

[gate]
quiet_hours = ""
min_interval = "0s"

[memory]
enabled = false

[tools]
enabled = false

[worker]
concurrency = 12

[daemon]
socket = "{path / "unused.sock"}"

{owners}
""",
        encoding="utf-8",
    )
    return config


class Worker:
    """`backthink worker` in a child process, its log in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKTHINK_", "OPENAI_"))}
        self.log = log
        self._out = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backthink", "--config", str(config), "worker"],
            cwd=config.parent,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def events(self, name: str) -> list[dict[str, object]]:
        found = []
        for line in self.log.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == name:
                found.append(entry)
        return found

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self._out.close()


def slot_of(record: RoundRecord) -> datetime | None:
    for note in record.notes:
        if note.startswith(SLOT_NOTE):
            return datetime.fromisoformat(note[len(SLOT_NOTE) :].split(",")[0])
    return None


def wait_until_all_busy(url: str, timeout_s: float = 30.0) -> None:
    """Wait until each of the WORKERS workers is running at least one round."""
    import psycopg

    from backthink.host.queue import ROUND_TASK, conninfo

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            (busy,) = conn.execute(
                "SELECT count(DISTINCT worker_id) FROM procrastinate_jobs"
                " WHERE task_name = %s AND status = 'doing'",
                (ROUND_TASK,),
            ).fetchone() or (0,)
            if busy >= WORKERS:
                return
            time.sleep(0.05)
    raise AssertionError("the workers were never all busy at once")


def jobs_left(url: str) -> dict[str, int]:
    """Round jobs still in the queue, by status (successful ones are deleted)."""
    import psycopg

    from backthink.host.queue import ROUND_TASK, conninfo

    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM procrastinate_jobs WHERE task_name = %s GROUP BY 1",
            (ROUND_TASK,),
        ).fetchall()
    return {str(status): int(count) for status, count in rows}


async def all_rounds(url: str) -> list[RoundRecord]:
    settings = Settings.model_validate({"database": {"url": url}})
    async with open_database(settings.database) as store:
        return await store.rounds.list(limit=100_000)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_three_workers_one_killed_mid_round(tmp_path: Path, pg_url: str, fake: FakeOpenAI) -> None:
    fake.script(*[Reply(NO_PUSH, delay_s=REPLY_DELAY_S)] * 6000)
    config = write_config(tmp_path, pg_url, fake.base_url)
    workers = [Worker(config, tmp_path / f"worker-{i}.log") for i in range(WORKERS)]
    victim = workers[0]
    try:
        deadline = time.monotonic() + 60
        while not all(w.events("worker.ready") for w in workers):
            assert time.monotonic() < deadline, [w.log.read_text()[-2000:] for w in workers]
            assert all(w.proc.poll() is None for w in workers), workers[0].log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(RUN_S)
        # Killed while every worker (so the victim too) has rounds in flight.
        wait_until_all_busy(pg_url)
        finished_before = len(victim.events("round.finished"))
        victim.stop(signal.SIGKILL)
        time.sleep(RUN_S)
    finally:
        codes = [w.stop() for w in workers[1:]]
        victim.stop(signal.SIGKILL)
    assert codes == [0, 0], [w.log.read_text()[-3000:] for w in workers[1:]]
    assert finished_before > 0  # the victim was doing its share before it died

    # Nothing is stuck: the dead worker's jobs were put back and finished.
    left = jobs_left(pg_url)
    assert left.get("doing", 0) == 0 and left.get("failed", 0) == 0, left
    requeued = sum(len(w.events("worker.round_requeued")) for w in workers[1:])
    rounds = asyncio.run(all_rounds(pg_url))
    by_owner: dict[str, list[RoundRecord]] = defaultdict(list)
    for record in rounds:
        by_owner[record.owner_id].append(record)
    assert len(by_owner) == OWNERS  # every owner got its rounds
    greetings = Counter(r.owner_id for r in rounds if r.trigger == "startup")
    assert set(greetings.values()) == {1}  # greeted once each across three workers
    failed = [r for r in rounds if r.outcome.value == "failed"]
    assert failed == [], failed[:3]

    beat = timedelta(seconds=HEARTBEAT_S)
    expected = int(2 * RUN_S / HEARTBEAT_S) - 3  # slots every owner must have had
    for owner, records in by_owner.items():
        slots = sorted(s for r in records if r.trigger == "heartbeat" and (s := slot_of(r)))
        assert len(slots) == len(set(slots)), f"{owner}: a slot ran twice"
        assert len(slots) >= expected, f"{owner}: {len(slots)} slots, expected {expected}"
        gaps = [b - a for a, b in itertools.pairwise(slots)]
        assert set(gaps) <= {beat}, f"{owner}: a slot is missing: {gaps}"
    # The victim's cut-off rounds ran again elsewhere once it was seen dead, then were recorded.
    retried = [
        r for r in rounds if (s := slot_of(r)) and (r.started_at - s) > timedelta(seconds=STALLED_S)
    ]
    worst = max((r.started_at - s for r in rounds if (s := slot_of(r))), default=None)
    assert retried, f"no round was cut off and run again: {requeued} requeued, latest {worst}"
    assert requeued >= len(retried)


def test_a_sweep_passes_over_an_owner_row_it_cannot_read(pg_url: str) -> None:
    """A row another program wrote wrong is not scheduled; the sweep goes on for the others."""
    from sqlalchemy import text

    from backthink.host.app import AppOverrides
    from backthink.host.fleet import open_fleet
    from backthink.host.queue import ROUND_TASK, Queue, apply_schema, queue_app
    from backthink.store import create_engine

    settings = Settings.model_validate(
        {
            "owner": {"id": "o", "timezone": "UTC"},
            "database": {"url": pg_url},
            "schedule": {"heartbeat": "10s", "startup_greeting": False},
            "state": {"file": ""},
        }
    )
    at = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)

    async def sweep() -> None:
        async with open_fleet(settings, AppOverrides(model=None)) as fleet:
            engine = create_engine(pg_url)
            try:
                async with engine.begin() as conn:
                    await conn.execute(
                        text(
                            "INSERT INTO owner (id, name, timezone, channels, gate, enabled,"
                            " source, updated_at) VALUES ('bad', '', 'Mars/Olympus', '{}', '{}',"
                            " true, 'cli', now())"
                        )
                    )
            finally:
                await engine.dispose()
            app = queue_app(pg_url)
            await apply_schema(fleet.claims)
            async with app.open_async():
                queue = Queue(fleet, fleet.claims, app)
                await queue.sweep(at)  # every owner gets its first due time
                await queue.sweep(at + timedelta(seconds=20))  # 'o' is due now

    asyncio.run(sweep())
    import psycopg

    from backthink.host.queue import conninfo

    with psycopg.connect(conninfo(pg_url)) as conn:
        rows = conn.execute(
            "SELECT args->>'owner_id' FROM procrastinate_jobs WHERE task_name = %s",
            (ROUND_TASK,),
        ).fetchall()
    assert rows == [("o",)]
