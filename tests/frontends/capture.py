"""The requests Open WebUI sent the relay, as fixtures the default suite can replay.

One JSON file per request, named by the story's step and the request's
kind (`chat`, a task name such as `title_generation`, or `models`), numbered
in story order and, inside a step, in a fixed order of kinds, so a rewrite
gives the same names whatever order the concurrent tasks arrived in. What
belongs to this machine is replaced by stable placeholders: the owner's
token, ports, temporary paths, and random ids (numbered in order of first
appearance). Hop headers whose value depends on the rest (`content-length`)
keep their name with a placeholder value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .openwebui import VERSION
from .replies import task_of
from .story import Story
from .tap import Tapped

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / f"openwebui-{VERSION}"
KINDS = (
    "models",
    "title_generation",
    "chat",
    "follow_up_generation",
    "tags_generation",
    "autocomplete_generation",
    "query_generation",
    "image_prompt_generation",
    "unknown_task",
    "other",
)
"""The order of kinds inside one step (the title is asked before the turn)."""
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost):\d{2,5}\b")


def kind_of(record: Tapped) -> str:
    """What a tapped request is: `models`, `chat`, a task's name, or `other`."""
    if record.path.endswith("/models"):
        return "models"
    if record.path.endswith("/chat/completions"):
        return task_of(record.body) or "chat"
    return "other"


class Scrub:
    """Replaces what belongs to one machine and one run with stable placeholders."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        """`secrets`: exact strings (tokens, paths) and their placeholders."""
        self._secrets = sorted(secrets.items(), key=lambda item: -len(item[0]))
        self._ids: dict[str, str] = {}

    def text(self, value: str) -> str:
        """One string, scrubbed."""
        for secret, placeholder in self._secrets:
            value = value.replace(secret, placeholder)
        value = _PORT.sub(lambda m: f"{m.group(1)}:<port>", value)
        return _UUID.sub(self._id, value)

    def _id(self, match: re.Match[str]) -> str:
        return self._ids.setdefault(match.group(0), f"<id-{len(self._ids) + 1}>")

    def value(self, value: Any) -> Any:
        """A JSON value, scrubbed all through (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        return value


def fixtures(story: Story, scrub: Scrub) -> dict[str, dict[str, Any]]:
    """Every request Open WebUI sent the relay in the story, by fixture file name."""
    found: dict[str, dict[str, Any]] = {}
    number = 0
    models_seen = False
    for step in story.steps.values():
        order = sorted(step.tapped, key=lambda r: (KINDS.index(kind_of(r)), r.seq))
        names: dict[str, int] = {}
        for record in order:
            kind = kind_of(record)
            if kind == "models":
                if models_seen:
                    continue  # asked again and again, always the same
                models_seen = True
            names[kind] = names.get(kind, 0) + 1
            number += 1
            suffix = f"-{names[kind]}" if names[kind] > 1 else ""
            headers = dict(record.headers)
            if "content-length" in headers:
                headers["content-length"] = "<length>"
            found[f"{number:02d}-{step.name}-{kind}{suffix}.json"] = {
                "openwebui": VERSION,
                "step": step.name,
                "kind": kind,
                "method": record.method,
                "path": record.path,
                "headers": scrub.value(headers),
                "body": scrub.value(record.body),
            }
    return found


def write(found: Mapping[str, Mapping[str, Any]], folder: Path = FOLDER) -> None:
    """Replace the folder's fixtures (its README stays)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for name, doc in found.items():
        (folder / name).write_text(_dump(doc), encoding="utf-8")


def differences(found: Mapping[str, Mapping[str, Any]], folder: Path = FOLDER) -> list[str]:
    """How the committed fixtures differ from `found` (empty when they are the same)."""
    held = {p.name: p for p in folder.glob("*.json")}
    problems = [f"missing: {name}" for name in sorted(set(found) - set(held))]
    problems += [f"no longer sent: {name}" for name in sorted(set(held) - set(found))]
    for name in sorted(set(found) & set(held)):
        if held[name].read_text(encoding="utf-8") != _dump(found[name]):
            problems.append(f"changed: {name}")
    return problems


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def loaded(folder: Path = FOLDER) -> Iterable[dict[str, Any]]:
    """The committed fixtures, in file-name order."""
    for path in sorted(folder.glob("*.json")):
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        yield doc
