"""The documents name only files and modules that exist.

A path such as `backthink/round/thinker.py`, `tests/support/fake_openai.py` or
`bench/recall.py` written anywhere in the docs must be a file of the checkout,
and a module written as a bare file name (`thinker.py`) must be the name of one
of the checkout's files: a rename that forgets the docs fails here, not in a
newcomer's hands.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from backthink.cli.root import app
from backthink.config import ApiSettings, GateSettings

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "bench" / "README.md",
        ROOT / "eval" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
# A path inside the checkout: a top folder of the project, then path characters, ending .py.
PATH = re.compile(r"\b((?:backthink|tests|bench|eval|\.ci)/[\w/.-]*?\.py)\b")
# A bare module file name in backticks, as the docs write a module they mean.
BARE = re.compile(r"`([\w]+\.py)`")


def python_files() -> set[str]:
    """The names of every Python file in the checkout's own folders."""
    names: set[str] = set()
    for top in ("backthink", "tests", "bench", "eval", ".ci"):
        names.update(p.name for p in (ROOT / top).rglob("*.py"))
    return names


def named(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(document, name) for every match of `pattern` in the documents."""
    found = []
    for doc in DOCS:
        for match in pattern.finditer(doc.read_text(encoding="utf-8")):
            found.append((str(doc.relative_to(ROOT)), match.group(1)))
    return found


def test_the_pattern_finds_paths_and_bare_names() -> None:
    """The readers catch both forms the docs use, and nothing of prose around them."""
    text = "see backthink/round/thinker.py, `thinker.py` and tests/support/fake_openai.py."
    assert [m.group(1) for m in PATH.finditer(text)] == [
        "backthink/round/thinker.py",
        "tests/support/fake_openai.py",
    ]
    assert [m.group(1) for m in BARE.finditer(text)] == ["thinker.py"]


@pytest.mark.parametrize("doc", [str(d.relative_to(ROOT)) for d in DOCS])
def test_every_path_a_document_names_exists(doc: str) -> None:
    """Each `backthink/…py`, `tests/…py` or `bench/…py` path in a document is a file."""
    missing = [name for where, name in named(PATH) if where == doc and not (ROOT / name).is_file()]
    assert missing == [], f"{doc} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", [str(d.relative_to(ROOT)) for d in DOCS])
def test_every_module_a_document_names_exists(doc: str) -> None:
    """Each bare `name.py` in a document is the name of a file of the checkout."""
    files = python_files()
    missing = sorted({name for where, name in named(BARE) if where == doc and name not in files})
    assert missing == [], f"{doc} names modules that do not exist: {missing}"


def _minutes(value: timedelta) -> str:
    return f"{int(value.total_seconds() // 60)} min"


@pytest.mark.parametrize(
    ("doc", "key", "default"),
    [
        ("README.md", "gate.activity_window", _minutes(GateSettings().activity_window)),
        ("README.md", "api.seen_window", _minutes(ApiSettings().seen_window)),
        ("docs/api.md", "gate.activity_window", _minutes(GateSettings().activity_window)),
    ],
)
def test_a_default_the_docs_state_is_the_code_default(doc: str, key: str, default: str) -> None:
    """Where a document gives a setting's default beside its name, it is the code's default."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    stated = re.findall(rf"`{re.escape(key)}` \((\d+ min)\)", text)
    assert stated, f"{doc} no longer states the default of {key}"
    assert set(stated) == {default}


def test_the_readme_lists_every_command_and_no_other() -> None:
    """The README's command table names each command of `backthink --help`, groups included."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1] for line in readme.splitlines() if line.startswith("| `backthink ")]
    listed = {name for cell in rows for name in re.findall(r"`backthink ([a-z]+)", cell)}
    commands = {c.name for c in app.registered_commands} | {
        g.name for g in app.registered_groups if g.name
    }
    assert listed == commands
