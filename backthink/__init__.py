"""backthink: a proactive-companion daemon that thinks on a heartbeat and pushes fail-safe.

The names below are loaded on first use, so importing one room of the
package never loads another.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backthink.decision.footer import parse_footer
    from backthink.models import Decision, Message, Outcome, RoundState, Urgency
    from backthink.records import RoundRecord

__all__ = ["Decision", "Message", "Outcome", "RoundRecord", "RoundState", "Urgency", "parse_footer"]
__version__ = "0.1.0"

_HOMES = {
    "Decision": "backthink.models",
    "Message": "backthink.models",
    "Outcome": "backthink.models",
    "RoundState": "backthink.models",
    "Urgency": "backthink.models",
    "RoundRecord": "backthink.records",
    "parse_footer": "backthink.decision.footer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'backthink' has no attribute {name!r}")
    return getattr(import_module(home), name)
