"""Fixtures of the front-ends tier: the stack, started once per module, and the story played on it.

Open WebUI comes from its own virtual environment (`make test-frontends`
builds `.venv-frontends`); `BACKTHINK_OPEN_WEBUI` names its `open-webui`
executable elsewhere. Without it the tier is skipped, saying how to get it;
with the variable set and the file missing, it fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .capture import Scrub
from .stack import Stack, running_stack
from .story import Player, Story

ROOT = Path(__file__).resolve().parents[2]
EXECUTABLE_ENV = "BACKTHINK_OPEN_WEBUI"
DEFAULT_EXECUTABLE = ROOT / ".venv-frontends" / "bin" / "open-webui"
REWRITE_OPTION = "--rewrite-fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--rewrite-fixtures`: write what Open WebUI sent into tests/fixtures/openwebui-*/."""
    parser.addoption(
        REWRITE_OPTION,
        action="store_true",
        default=False,
        help="rewrite the Open WebUI request fixtures from this run (front-ends tier)",
    )


@pytest.fixture(scope="session")
def open_webui_executable() -> Path:
    """The `open-webui` executable of the pinned version."""
    named = os.environ.get(EXECUTABLE_ENV, "").strip()
    if named:
        path = Path(named).resolve()
        assert path.is_file(), f"{EXECUTABLE_ENV}={named}: no such file"
        return path
    if not DEFAULT_EXECUTABLE.is_file():
        pytest.skip(
            f"no Open WebUI at {DEFAULT_EXECUTABLE}: `make test-frontends` installs it, "
            f"or set {EXECUTABLE_ENV} to an open-webui executable"
        )
    return DEFAULT_EXECUTABLE


@pytest.fixture(scope="module")
def stack(open_webui_executable: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Everything running: fake upstream, tap, Open WebUI, backthink."""
    with running_stack(open_webui_executable, tmp_path_factory.mktemp("frontends")) as running:
        yield running


@pytest.fixture(scope="module")
def story(stack: Stack) -> Story:
    """The story, played once; every test reads what it left."""
    return Player(stack).play()


@pytest.fixture(scope="module")
def scrub(stack: Stack) -> Scrub:
    """The placeholders for this run's token, folders and keys."""
    return Scrub(
        {
            stack.token: "<owner-token>",
            str(stack.folder): "<tmp>",
            stack.browser.user["id"]: "<user-id>",
        }
    )


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """Whether this run rewrites the fixtures."""
    return bool(request.config.getoption(REWRITE_OPTION, default=False))
