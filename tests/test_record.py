"""The round record's last resort: the spill file beside the database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from backthink.errors import StoreError
from backthink.models import Outcome
from backthink.records import RoundRecord
from backthink.round.recorder import Recorder
from backthink.round.spill import Spill
from backthink.store import VolatileRoundStore

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
DEAD_PID = 2**22 + 1  # above Linux's pid_max: no process has it


def record(round_id: str) -> RoundRecord:
    """A finished round that reached no one."""
    return RoundRecord(
        id=round_id,
        owner_id="o",
        trigger="heartbeat",
        started_at=T0,
        finished_at=T0,
        outcome=Outcome.FAILED,
        reason="store_error",
        raw_reply="私密的回复",
    )


class RefusingRounds(VolatileRoundStore):
    """A round store whose saves fail until told otherwise, like a locked database."""

    refuse = True

    async def save(self, record: RoundRecord) -> None:
        if self.refuse:
            raise StoreError("could not save round: database is locked")
        await super().save(record)


async def test_a_refused_record_waits_in_the_spill_and_is_written_in_later(tmp_path: Path) -> None:
    """The database refuses a record: it is kept, then written in by the next saved round."""
    rounds = RefusingRounds()
    spill = Spill(tmp_path / "bt.db.spill.jsonl")
    recorder = Recorder(rounds, spill=spill)
    assert await recorder.save(record("r1")) is False
    assert spill.waiting()
    assert spill.path.stat().st_mode & 0o777 == 0o600  # raw replies are private
    rounds.refuse = False
    assert await recorder.save(record("r2")) is True
    assert await rounds.get("r1") == record("r1")
    assert not spill.waiting()


async def test_a_drain_that_fails_again_keeps_what_is_left(tmp_path: Path) -> None:
    """Records not written in when the database fails again go back into the spill."""
    rounds = RefusingRounds()
    spill = Spill(tmp_path / "s.jsonl")
    spill.append(record("r1"))
    spill.append(record("r2"))
    assert await spill.drain(rounds) == 0
    rounds.refuse = False
    await rounds.save(record("r1"))  # written in meanwhile by another process
    assert await spill.drain(rounds) == 1
    assert await rounds.get("r2") == record("r2")
    assert not spill.waiting()


async def test_records_claimed_by_a_dead_process_are_adopted(tmp_path: Path) -> None:
    """A drain cut short by a crash leaves its claimed records; the next drain takes them."""
    rounds = VolatileRoundStore()
    spill = Spill(tmp_path / "s.jsonl")
    orphan = tmp_path / f"s.jsonl.{DEAD_PID}.draining"
    orphan.write_text(record("r9").model_dump_json() + "\n", encoding="utf-8")
    assert await spill.drain(rounds) == 1
    assert await rounds.get("r9") == record("r9")
    assert not orphan.exists()


async def test_a_start_takes_over_claimed_records_without_a_spill_file(tmp_path: Path) -> None:
    """Only a crashed drain's claim is left: the thorough drain at start still writes it in."""
    rounds = VolatileRoundStore()
    recorder = Recorder(rounds, spill=Spill(tmp_path / "s.jsonl"))
    orphan = tmp_path / f"s.jsonl.{DEAD_PID}.draining"
    orphan.write_text(record("r8").model_dump_json() + "\n", encoding="utf-8")
    assert await recorder.drain() == 0  # after a save, only the spill file is looked for
    assert await recorder.drain(thorough=True) == 1
    assert await rounds.get("r8") == record("r8")


async def test_a_full_disk_keeps_the_record_in_the_reserve_and_status_says_so(
    tmp_path: Path,
) -> None:
    """The database and the spill file refused for a full disk: the reserve keeps the record."""
    from backthink.host.status import disk_state
    from backthink.round.spill import RESERVE_BYTES

    path = tmp_path / "bt.db.spill.jsonl"
    spill = Spill(path)
    assert spill.prepare() and spill.reserve.stat().st_size == RESERVE_BYTES
    # Every write to the spill file fails as on a full disk (ENOSPC); the reserve was
    # allocated before, so writing into it needs no new space.
    path.symlink_to("/dev/full")
    rounds = RefusingRounds()
    recorder = Recorder(rounds, spill=spill)
    assert await recorder.save(record("r1")) is False
    assert spill.in_reserve() == 1
    assert spill.reserve.stat().st_size == RESERVE_BYTES
    disk = disk_state(path)
    assert disk.full and disk.waiting == 1 and "wait in the reserve" in disk.describe()

    path.unlink()  # room again
    rounds.refuse = False
    assert await recorder.save(record("r2")) is True
    assert [r.id for r in await rounds.list(limit=10)] == ["r2", "r1"]
    assert spill.in_reserve() == 0 and not disk_state(path).full
    stored = await rounds.get("r1")
    assert stored is not None and stored.raw_reply == "私密的回复"
