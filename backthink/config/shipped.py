"""What the package ships beside its code: prompt templates, the default persona, the
example config and the systemd unit templates, read with importlib.resources.

Everything a round needs is inside the installed package, so an installation runs
from any working directory without a checkout beside it.
"""

from __future__ import annotations

import string
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Literal

from backthink.models import Language

Scope = Literal["user", "system"]

_PACKAGE = "backthink"


def prompt_templates() -> Traversable:
    """The folder of the shipped `guidance.<lang>.md` and `startup.<lang>.md` templates."""
    return files(_PACKAGE) / "prompts"


def data_file(name: str) -> Traversable:
    """One file of the shipped data folder (`backthink/data/`)."""
    return files(_PACKAGE).joinpath("data", *name.split("/"))


def default_persona(language: Language, *, persona_name: str, owner_name: str) -> str:
    """The shipped persona prompt of a language, with the persona's and owner's names filled in."""
    text = data_file(f"persona.{language}.md").read_text(encoding="utf-8")
    return string.Template(text).safe_substitute(persona_name=persona_name, owner_name=owner_name)


def example_config() -> str:
    """The commented example config: every key with its default and what it does."""
    return data_file("backthink.example.toml").read_text(encoding="utf-8")


def unit_template(scope: Scope) -> str:
    """The systemd unit template for a user or a system service."""
    return data_file(f"systemd/backthink.{scope}.service").read_text(encoding="utf-8")
