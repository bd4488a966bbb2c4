"""Fixtures of the live tier: the endpoint from the environment and working folders using it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .live_helpers import BASE_URL_ENV, DEFAULT_MODEL, MODEL_ENV, LiveWorkdir


@pytest.fixture(scope="session")
def live_base_url() -> str:
    """The OpenAI-compatible endpoint to test against; the tests skip without one."""
    url = os.environ.get(BASE_URL_ENV, "").strip()
    if not url:
        pytest.skip(
            f"{BASE_URL_ENV} is not set: run `make test-live`, which serves a local model "
            f"and sets it, or point it at a running server, e.g. "
            f"{BASE_URL_ENV}=http://127.0.0.1:8000/v1 pytest -m live tests/live"
        )
    return url


@pytest.fixture(scope="session")
def live_model() -> str:
    """The model name sent with each request."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


@pytest.fixture
def make_workdir(
    tmp_path: Path, live_base_url: str, live_model: str
) -> Callable[[str], LiveWorkdir]:
    """Build a fresh working folder for one prompt language."""

    def make(language: str) -> LiveWorkdir:
        path = tmp_path / language
        path.mkdir()
        return LiveWorkdir(path, live_base_url, language, live_model)

    return make
