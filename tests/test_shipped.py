"""What the package ships: templates, the default persona, the example config, unit templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from backthink.config import Settings
from backthink.config.shipped import example_config, prompt_templates, unit_template
from backthink.host.app import read_persona_prompt
from backthink.round.prompts import PromptBook


@pytest.mark.parametrize("language", ["zh", "en"])
def test_shipped_templates_load(language: str) -> None:
    """Both languages' guidance and startup templates load from inside the package."""
    book = PromptBook.load(prompt_templates(), language)  # type: ignore[arg-type]
    assert "${channels}" in book.guidance.template
    assert book.startup.template.strip()


def test_prompt_dir_defaults_to_shipped_and_overrides() -> None:
    """No prompt.dir means the shipped templates; a folder of one's own replaces them."""
    assert Settings().prompt.dir is None
    assert Settings(prompt={"dir": ""}).prompt.dir is None  # type: ignore[arg-type]
    assert Settings(prompt={"dir": "/x/prompts"}).prompt.dir == Path("/x/prompts")  # type: ignore[arg-type]


def test_default_persona_is_shipped_and_named() -> None:
    """Without persona.prompt_file the shipped persona of the language speaks, names filled in."""
    zh = Settings(persona={"name": "昔涟"}, owner={"name": "开拓者"})  # type: ignore[arg-type]
    text = read_persona_prompt(zh)
    assert text.startswith("你是昔涟，开拓者的 AI 伙伴")
    en = Settings(persona={"id": "cyrene"}, prompt={"language": "en"})  # type: ignore[arg-type]
    assert read_persona_prompt(en).startswith("You are cyrene, your owner's AI companion")
    assert "$" not in text + read_persona_prompt(en)


def test_persona_prompt_file_overrides(tmp_path: Path) -> None:
    """A configured persona file is read as written, without filling anything in."""
    own = tmp_path / "p.md"
    own.write_text("你是${persona_name}吗", encoding="utf-8")
    settings = Settings(persona={"prompt_file": str(own)})  # type: ignore[arg-type]
    assert read_persona_prompt(settings) == "你是${persona_name}吗"


def test_one_copy_of_the_example_config() -> None:
    """The checkout's example config is the shipped one, not a second copy."""
    assert (ROOT / "config/backthink.example.toml").read_text(encoding="utf-8") == example_config()
    assert not (ROOT / "config/prompts").exists()


@pytest.mark.parametrize("scope", ["user", "system"])
def test_unit_templates_ship(scope: str) -> None:
    """Both unit templates ship, with the placeholders the installer fills in."""
    text = unit_template(scope)  # type: ignore[arg-type]
    assert "@EXEC_START@" in text
    assert "EnvironmentFile=-@ENV_FILE@" in text
