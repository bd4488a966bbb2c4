"""backthink: a proactive-companion daemon that thinks on a heartbeat and pushes fail-safe."""

from backthink.footer import parse_footer
from backthink.models import Decision, Message, Outcome, RoundRecord, RoundState, Urgency

__all__ = ["Decision", "Message", "Outcome", "RoundRecord", "RoundState", "Urgency", "parse_footer"]
__version__ = "0.1.0"
