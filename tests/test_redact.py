"""Credentials inside URLs never reach the screen or the log."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
import structlog
from support.fake_openai import FakeOpenAI

from backthink.config import Settings, load_settings
from backthink.errors import ConfigError
from backthink.host import logs
from backthink.host.checks import run_checks
from backthink.redact import redact_url, redact_urls

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pass@host/v1", "https://***@host/v1"),
        ("https://token@host:8443/v1", "https://***@host:8443/v1"),
        ("https://us%40er:p@ss@host/v1", "https://***@host/v1"),
        ("https://host/v1", "https://host/v1"),
        ("https://host/v1?api_key=abc&model=x", "https://host/v1?api_key=***&model=x"),
        ("https://host/hook?token=abc#frag", "https://host/hook?token=***#frag"),
        (
            "https://host/?Key=1&SECRET=2&password=3",
            "https://host/?Key=***&SECRET=***&password=***",
        ),
        (
            "https://host/?access_token=a&x-api-key=b",
            "https://host/?access_token=***&x-api-key=***",
        ),
        ("https://host/?keyboard=qwerty", "https://host/?keyboard=qwerty"),
        ("https://host/?token", "https://host/?token"),
        ("postgresql+psycopg://bt:pw@db:5432/bt", "postgresql+psycopg://***@db:5432/bt"),
        ("sqlite+aiosqlite:///var/backthink.db", "sqlite+aiosqlite:///var/backthink.db"),
        ("not a url", "not a url"),
        ("", ""),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    """Userinfo becomes *** and secret-looking query values are masked; the rest is kept."""
    assert redact_url(url) == shown


def test_redact_urls_in_free_text() -> None:
    """Every URL inside a sentence is redacted, and the words around it are kept."""
    text = "cannot reach https://u:p@a.example/v1 (via http://b.example/?key=k), giving up"
    assert redact_urls(text) == (
        "cannot reach https://***@a.example/v1 (via http://b.example/?key=***), giving up"
    )


def test_config_error_does_not_quote_credentials(tmp_path: Path) -> None:
    """A rejected model URL is named in the config error without its user and password."""
    path = tmp_path / "backthink.toml"
    path.write_text('[model]\nbase_url = "ftp://user:hunter2@host/v1"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "ftp://***@host/v1" in str(caught.value)
    assert "hunter2" not in str(caught.value)


async def test_check_shows_the_model_url_without_credentials(
    tmp_path: Path, fake_server: FakeOpenAI
) -> None:
    """backthink check names the endpoint it probed, with its user and password masked."""
    fake_server.reset()
    base_url = fake_server.base_url.replace("http://", "http://bt:hunter2@")
    settings = Settings.model_validate(
        {
            "model": {"base_url": base_url, "api_key": "sk-test-0123456789"},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'bt.db'}"},
            "prompt": {"dir": str(ROOT / "backthink/prompts")},
        }
    )
    lines = [checked.line async for checked in run_checks(settings)]
    model_line = next(line for line in lines if line.startswith("model:"))
    assert "hunter2" not in model_line
    assert "http://***@127.0.0.1" in model_line


def test_log_lines_redact_urls() -> None:
    """A URL with credentials in any log field is redacted before it is written."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers, root.level
    logs.configure(stream=stream, json=True)
    try:
        structlog.get_logger("t").info(
            "daemon.started",
            endpoint="https://u:hunter2@h/v1",
            nested={"url": "http://h/?token=t0k"},
        )
    finally:
        structlog.reset_defaults()
        root.handlers, root.level = handlers, level
    line = json.loads(stream.getvalue())
    assert line["endpoint"] == "https://***@h/v1"
    assert line["nested"] == {"url": "http://h/?token=***"}
