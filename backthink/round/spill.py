"""Round records the database refused, kept on disk until it takes them, even on a full disk.

A record the database refuses (locked past the busy timeout, read-only,
deleted, the disk full) is appended to a spill file beside the database and
written in at the next chance. The spill file sits on the same disk as the
database, so the fault that made the database refuse often refuses the spill
too: a full disk. For that, a reserve file of `RESERVE_BYTES` is allocated
beforehand (`prepare`, at every start); writing into space already allocated
needs no free space, so a record the disk refused is written there instead,
and `status` says the disk is full until the reserve is emptied.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Final, TextIO

import structlog
from pydantic import ValidationError

from backthink.errors import StoreError
from backthink.ports import RoundStore
from backthink.records import RoundRecord

log = structlog.get_logger(__name__)

RESERVE_BYTES: Final = 1024 * 1024  # bytes allocated beforehand for records a full disk refuses
RESERVE_SUFFIX: Final = ".reserve"
_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
_CHUNK: Final = 64 * 1024  # bytes written at a time when space is allocated by hand


def disk_full(exc: OSError) -> bool:
    """Whether an error says the disk (or the user's quota) has no room left."""
    return exc.errno in _FULL


class Spill:
    """Round records the database refused, one JSON line each, until it takes them.

    Appends are serialised between processes with an advisory lock; a drain
    first claims the whole file by renaming it, so two processes never write
    the same records in, and no lock is held while the database is awaited.
    The reserve beside it holds records in its allocated space, ended by the
    first zero byte, and is zeroed again once they are written in.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reserve = path.with_name(path.name + RESERVE_SUFFIX)

    def prepare(self) -> bool:
        """Allocate the reserve if it is not there yet; False when the disk has no room for it."""
        try:
            if self.reserve.exists() and self.reserve.stat().st_size >= RESERVE_BYTES:
                return True
            fd = os.open(self.reserve, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                _allocate(fd, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("round.reserve_unavailable", error=exc.strerror or type(exc).__name__)
            return False
        return True

    def append(self, record: RoundRecord) -> bool:
        """Add one record durably (flushed and synced before returning).

        Returns:
            False when the spill file was refused for a full disk and the record
            went into the reserve instead.

        Raises:
            OSError: neither the spill file nor the reserve could take it.
        """
        line = record.model_dump_json() + "\n"
        try:
            with self._open() as out:
                fcntl.flock(out, fcntl.LOCK_EX)
                out.write(line)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            if not disk_full(exc):
                raise
            self._into_reserve(line.encode("utf-8"))
            return False
        return True

    def _into_reserve(self, data: bytes) -> None:
        """Write one line into the reserve's allocated space, after the lines already there.

        Raises:
            OSError: there is no reserve, or no room left in it.
        """
        with self.reserve.open("r+b") as reserve:
            fcntl.flock(reserve, fcntl.LOCK_EX)
            held = reserve.read()
            end = held.find(b"\0")
            if end < 0 or end + len(data) > len(held):
                raise OSError(errno.ENOSPC, "the reserve is full too")
            reserve.seek(end)
            reserve.write(data)
            reserve.flush()
            os.fsync(reserve.fileno())

    def _open(self) -> TextIO:
        # Records hold raw replies: private, so readable by the daemon's user only.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8")

    def in_reserve(self) -> int:
        """How many records wait in the reserve (a full disk refused them); 0 without one."""
        try:
            with self.reserve.open("rb") as reserve:
                held = reserve.read()
        except OSError:
            return 0
        end = held.find(b"\0")
        return (held if end < 0 else held[:end]).count(b"\n")

    def waiting(self) -> bool:
        """Whether records wait to be written in (a cheap check, done after every save)."""
        return self.path.exists() or self._reserve_used()

    def _reserve_used(self) -> bool:
        """Whether the reserve holds a record: records start at its first byte."""
        try:
            with self.reserve.open("rb") as reserve:
                first = reserve.read(1)
        except OSError:
            return False
        return first not in (b"", b"\0")

    async def drain(self, rounds: RoundStore) -> int:
        """Write every waiting record into `rounds`; return how many were written.

        A record already stored is skipped; when the database fails again the
        records not yet written go back into the spill (or stay in the reserve).
        """
        written = await self._drain_reserve(rounds)
        claimed = self.path.with_name(f"{self.path.name}.{os.getpid()}.draining")
        self._adopt_orphans(claimed)
        try:
            os.replace(self.path, claimed)
        except FileNotFoundError:
            if not claimed.exists():
                return written
        lines = claimed.read_text(encoding="utf-8").splitlines()
        written += await self._write_in(lines, rounds, unreadable="round.spill_unreadable")
        claimed.unlink()
        if written:
            log.info("round.spill_written", count=written)
        return written

    async def _drain_reserve(self, rounds: RoundStore) -> int:
        """Write in the records of the reserve.

        They are taken out first, the space they took zeroed again (no new
        space needed), so no lock is held while the database is awaited; what
        the database refuses goes back.
        """
        if not self._reserve_used():
            return 0
        with self.reserve.open("r+b") as reserve:
            fcntl.flock(reserve, fcntl.LOCK_EX)
            held = reserve.read()
            end = held.find(b"\0")
            end = len(held) if end < 0 else end
            reserve.seek(0)
            reserve.write(b"\0" * end)
            reserve.flush()
            os.fsync(reserve.fileno())
        lines = held[:end].decode("utf-8", "replace").splitlines()
        written = await self._write_in(lines, rounds, unreadable="round.reserve_unreadable")
        if written:
            log.info("round.reserve_written", count=written)
        return written

    async def _write_in(self, lines: list[str], rounds: RoundStore, *, unreadable: str) -> int:
        """Save the records of `lines` the round log lacks; how many were written.

        A line that is no record is logged (`unreadable`, its number) and passed
        over; when the database refuses one, it and the rest go back to the spill.
        """
        written = 0
        for i, line in enumerate(lines):
            try:
                record = RoundRecord.model_validate_json(line)
            except ValidationError:
                log.error(unreadable, line=i + 1)
                continue
            try:
                if await rounds.get(record.id) is None:
                    await rounds.save(record)
                    written += 1
            except StoreError:
                for rest in lines[i:]:
                    self._put_back(rest)
                break
        return written

    def _adopt_orphans(self, claimed: Path) -> None:
        """Take over records a process claimed and died with before writing them in."""
        for other in self.path.parent.glob(f"{self.path.name}.*.draining"):
            pid = other.name.removeprefix(f"{self.path.name}.").removesuffix(".draining")
            if other == claimed or not pid.isdigit() or _alive(int(pid)):
                continue
            with other.open(encoding="utf-8") as orphan:
                for line in orphan.read().splitlines():
                    self._put_back(line)
            other.unlink()

    def _put_back(self, line: str) -> None:
        """Return a line not written in to the spill file, or to the reserve on a full disk."""
        try:
            with self._open() as out:
                fcntl.flock(out, fcntl.LOCK_EX)
                out.write(line + "\n")
        except OSError as exc:
            if not disk_full(exc):
                raise
            self._into_reserve((line + "\n").encode("utf-8"))


def _allocate(fd: int, size: int) -> None:
    """Give the file `size` bytes of allocated, zeroed space."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if disk_full(exc):
            raise
        # A file system without fallocate: zeros written by hand allocate the space too.
        os.lseek(fd, 0, os.SEEK_SET)
        for start in range(0, size, _CHUNK):
            os.write(fd, b"\0" * min(_CHUNK, size - start))
    os.fsync(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process is alive
    return True
