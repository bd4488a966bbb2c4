"""Whether a client watches an owner's session, for a round run outside the daemon.

With `[api]` on, only the daemon serves `/v1/events` and `/v1/messages`, so
only the daemon knows whether a chat app watches an owner's session. A
round run by another process (`backthink think`, `backthink worker`) asks
the daemon over its socket just before it runs (the `watched` field of the
socket's status answer), and the session channel counts as connected for
that round only when the daemon says a client watches. No
answer (no daemon on this machine, an owner it does not serve, a daemon too
busy to answer in time) counts as nobody watching: the push then goes to a
channel that reaches the owner, not into a session nobody may be reading.
"""

from __future__ import annotations

import structlog

from backthink.host.app import App
from backthink.host.fleet import Fleet
from backthink.host.poke import ask_status

log = structlog.get_logger(__name__)

ASK_TIMEOUT_S = 2.0  # seconds a round waits for the daemon's word before counting nobody


async def ask_daemon(fleet: Fleet, app: App, owner_id: str) -> None:
    """Before a round outside the daemon: take its word on whether the owner's session is watched.

    Does nothing in the daemon itself (its audience sees its own clients) or
    without the API.
    """
    audience = fleet.audience
    if audience is None or audience.serves or app.dispatcher.session_channel is None:
        return
    answer = await ask_status(
        fleet.settings.daemon.socket, owner_id=owner_id, timeout_s=ASK_TIMEOUT_S
    )
    watched = answer is not None and answer.get("watched") is True
    audience.vouch(owner_id, watched)
    log.debug("witness.asked", owner_id=owner_id, answered=answer is not None, watched=watched)
