"""What the gate reads of the main session: the owner's latest messages and the recent pushes.

A message dated beyond the clock skew (a wrong clock where it was written)
is no sign of the owner writing now, and must not hide their real latest
message either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from backthink.config import GateSettings
from backthink.decision.gate import GateHistory
from backthink.models import SessionView, credible
from backthink.ports import MessageStore

# How many of the owner's recent messages and pushes the gate looks at.
OWNER_CHANNEL_LOOKBACK = 20
PUSH_LOOKBACK_SPARE = 4
# The most recent pushes the gate ever reads: enough for a daily cap or an
# unanswered limit up to 30, and a read that stays cheap whatever the settings.
MAX_PUSH_LOOKBACK = 64


@dataclass(frozen=True)
class History:
    """The gate's history, and whether mis-dated owner messages were passed over."""

    gate: GateHistory
    ignored_future: bool


async def gate_history(
    messages: MessageStore, owner_id: str, settings: GateSettings, at: datetime
) -> History:
    """Read the gate's history fresh, newest first, after the model answered.

    Read after the model call, a message the owner sent while it was
    thinking counts.
    """
    g = settings
    # Enough pushes for two local days of the cap (a 24 h window spans two) and
    # for the unanswered count, plus a few written back by failed deliveries.
    lookback = min(2 * max(g.daily_cap, g.max_unanswered) + PUSH_LOOKBACK_SPARE, MAX_PUSH_LOOKBACK)
    activity = await messages.owner_activity(
        owner_id, messages=OWNER_CHANNEL_LOOKBACK, pushes=lookback
    )
    owner = [(ch, when) for ch, when in activity.owner_messages if credible(when, at)]
    return History(
        GateHistory(
            last_owner_message_at=owner[0][1] if owner else None,
            owner_channels=[channel for channel, _ in owner],
            pushes=activity.pushes,
        ),
        ignored_future=len(owner) < len(activity.owner_messages),
    )


def latest_credible(view: SessionView, at: datetime) -> datetime | None:
    """When the owner last wrote, passing over messages dated beyond the clock skew."""
    last = view.last_owner_message_at
    if last is None or credible(last, at):
        return last
    # The newest is mis-dated: the owner's real latest message is in the window, if recent.
    return max(
        (m.created_at for m in view.recent if m.role == "user" and credible(m.created_at, at)),
        default=None,
    )


async def owner_spoke(
    messages: MessageStore, owner_id: str, *, since: datetime | None, now: datetime
) -> bool:
    """Whether the owner wrote in the main session after `since` (None: at all)."""
    activity = await messages.owner_activity(owner_id, messages=1, pushes=0)
    if not activity.owner_messages:
        return False
    latest = activity.owner_messages[0][1]
    if not credible(latest, now):
        return False  # mis-dated: no sign of anyone writing now
    return since is None or latest > since
