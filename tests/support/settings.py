"""One settings factory for the tests: a shared base, with each test's sections laid over it.

    make_settings(gate={"min_interval": "0s"}, tools={"enabled": False})

is the companion (`COMPANION`: owner o, 开拓者, in Asia/Shanghai; persona cyrene, 昔涟;
the shipped prompts; the web page as the default channel; no quiet hours) with
`gate.min_interval` and `tools.enabled` changed and every other key kept. A
test that needs less starts from `BARE` (the owner's id and zone, the prompts,
no quiet hours), and `DROP` takes a key of the base out, so it falls back to
the settings' own default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from backthink.config import Settings

PROMPTS = str(Path(__file__).resolve().parents[2] / "backthink/prompts")


class _Drop:
    """The marker for a key to take out of the base."""

    def __repr__(self) -> str:
        return "DROP"


DROP: Final = _Drop()

BARE: Mapping[str, Any] = {
    "owner": {"id": "o", "timezone": "Asia/Shanghai"},
    "prompt": {"dir": PROMPTS},
    # Quiet hours off, so the hour at which the suite runs never decides an outcome.
    "gate": {"quiet_hours": ""},
}
COMPANION: Mapping[str, Any] = {
    "owner": {"id": "o", "name": "开拓者", "timezone": "Asia/Shanghai"},
    "persona": {"id": "cyrene", "name": "昔涟"},
    "prompt": {"dir": PROMPTS},
    "gate": {"default_channel": "web", "quiet_hours": ""},
}


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over` on it: tables merge key by key, other values replace, DROP removes."""
    out = dict(base)
    for key, value in over.items():
        if value is DROP:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            inner = out.get(key)
            out[key] = merged(inner if isinstance(inner, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def make_settings(*, base: Mapping[str, Any] = COMPANION, **sections: Any) -> Settings:
    """Settings from `base` with `sections` (each a section's keys, or DROP) laid over it."""
    return Settings.model_validate(merged(base, sections))
