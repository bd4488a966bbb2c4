"""The owner-state file: fresh, stale, missing, broken, undated."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from backthink.models import Availability, StateProblem
from backthink.round.state import FileStateProvider

AT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
MAX_AGE = timedelta(hours=6)


def provider(tmp_path: Path, doc: object | str | None) -> FileStateProvider:
    path = tmp_path / "state.json"
    if doc is not None:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return FileStateProvider(path, MAX_AGE)


def test_fresh_state(tmp_path: Path) -> None:
    """A fresh document is known, with every field parsed and unknown keys ignored."""
    reading = provider(
        tmp_path,
        {
            "updated_at": "2026-11-30T15:00:00+08:00",
            "availability": "dnd",
            "device": {"battery": "23%"},
            "schedule": [{"at": "2026-11-30T10:00:00+08:00", "title": "x"}],
            "notes": ["n"],
            "extra": 1,
        },
    ).read(AT)
    assert reading.known and reading.state is not None
    assert reading.state.availability is Availability.DND
    assert reading.state.schedule[0].title == "x"


def test_stale_state_is_unknown(tmp_path: Path) -> None:
    """A snapshot older than max_age says nothing about now."""
    reading = provider(
        tmp_path, {"updated_at": "2026-11-30T01:00:00+00:00", "availability": "dnd"}
    ).read(AT)
    assert not reading.known and reading.problem == "state_stale"


def test_missing_file(tmp_path: Path) -> None:
    """No file is unknown, not an error."""
    assert provider(tmp_path, None).read(AT).problem == "state_missing"
    assert FileStateProvider(None, MAX_AGE).read(AT).problem == "state_not_configured"


def test_broken_file_is_reported(tmp_path: Path) -> None:
    """A file that does not parse is unknown and says why."""
    broken = provider(tmp_path, "{nope").read(AT)
    assert broken.problem is StateProblem.INVALID
    assert broken.note is not None and broken.note.startswith("state_invalid: not JSON")
    bad = provider(tmp_path, {"availability": "asleep", "updated_at": AT.isoformat()}).read(AT)
    assert bad.note is not None and bad.note.startswith("state_invalid: availability")
    assert provider(tmp_path, "[1]").read(AT).note == (
        "state_invalid: the document must be a JSON object"
    )


def test_undated_file_uses_mtime(tmp_path: Path) -> None:
    """Without updated_at the file's modification time dates it."""
    p = provider(tmp_path, {"availability": "busy"})
    path = tmp_path / "state.json"
    stamp = (AT - timedelta(hours=1)).timestamp()
    os.utime(path, (stamp, stamp))
    reading = p.read(AT)
    assert reading.state is not None and reading.state.updated_at == AT - timedelta(hours=1)
    old = (AT - timedelta(hours=7)).timestamp()
    os.utime(path, (old, old))
    assert p.read(AT).problem == "state_stale"


def test_future_state_is_rejected(tmp_path: Path) -> None:
    """A snapshot from far in the future is not trusted."""
    reading = provider(tmp_path, {"updated_at": "2026-12-01T08:00:00+00:00"}).read(AT)
    assert reading.problem == "state_from_future"


def test_an_oversized_file_is_unknown_and_noted(tmp_path: Path) -> None:
    """A file larger than state.max_bytes counts as unknown, with a note, even if it is JSON."""
    path = tmp_path / "state.json"
    notes = ["n" * 1000] * 100
    path.write_text(json.dumps({"availability": "dnd", "notes": notes}), encoding="utf-8")
    reading = FileStateProvider(path, MAX_AGE, max_bytes=65_536).read(AT)
    assert not reading.known
    assert reading.problem is StateProblem.TOO_LARGE
    assert reading.note == "state_too_large: larger than 65536 bytes"
    assert not reading.problem.expected


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    """A file of exactly state.max_bytes bytes is still read."""
    path = tmp_path / "state.json"
    doc = json.dumps({"updated_at": AT.isoformat(), "availability": "busy", "notes": [""]})
    pad = 200 - len(doc)
    doc = doc.replace('[""]', '["' + "x" * pad + '"]')
    path.write_text(doc, encoding="utf-8")
    assert path.stat().st_size == 200
    assert FileStateProvider(path, MAX_AGE, max_bytes=200).read(AT).known
    assert FileStateProvider(path, MAX_AGE, max_bytes=199).read(AT).problem == "state_too_large"


def test_a_document_nested_too_deep_is_invalid(tmp_path: Path) -> None:
    """Arrays nested past the decoder's depth make the state unknown, never a failed round."""
    deep = provider(tmp_path, "[" * 20_000).read(AT)
    assert deep.problem is StateProblem.INVALID
    assert deep.note == "state_invalid: not JSON (nested too deep)"
