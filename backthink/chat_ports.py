"""The ports chat apps are served through: the main session a page at a time, and API tokens.

The API room reads and writes through these, as a round does through
`backthink.ports`; the SQL stores implement them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol

from backthink.models import MAIN_SESSION, Message, SessionEntry


class ChatSession(Protocol):
    """The main session as chat apps read and write it: pages, pushes, idempotent writes.

    Positions are message ids; a page costs the same at any history size.
    """

    async def page(
        self,
        owner_id: str,
        *,
        after: int | None,
        limit: int,
        max_chars: int | None = None,
        session_id: str = MAIN_SESSION,
        every: bool = False,
    ) -> list[SessionEntry] | None:
        """Messages after the message `after`, oldest first; without `after`, the newest `limit`.

        With `max_chars` the page stops once its texts and images pass that
        many characters (one message at least). None when `after` is not a
        message of this owner's session. Superseded messages are left out
        unless `every` asks for them.
        """
        ...

    async def recent(
        self, owner_id: str, *, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry]:
        """The newest `limit` messages, oldest first, without their images."""
        ...

    async def pushes(
        self, owner_id: str, *, after: int, limit: int, session_id: str = MAIN_SESSION
    ) -> list[SessionEntry]:
        """The companion's pushes with an id above `after`, by id."""
        ...

    async def last_push_id(self, owner_id: str, *, session_id: str = MAIN_SESSION) -> int | None:
        """The highest id of the owner's pushes, or None when there is none yet."""
        ...

    async def holds(
        self, owner_id: str, message_id: int, *, session_id: str = MAIN_SESSION
    ) -> bool:
        """Whether `message_id` is a message of the owner's session."""
        ...

    async def revise(self, owner_id: str, message_id: int, text: str) -> bool:
        """Put `text` in place of a message's own, keeping its id and time; False when gone."""
        ...

    async def supersede(self, owner_id: str, message_ids: Collection[int]) -> int:
        """Mark messages of the owner superseded (kept, read only by `page(every=True)`).

        Returns how many were marked.
        """
        ...

    async def append(self, messages: Sequence[Message]) -> list[Message]:
        """Store one owner's messages in one transaction; return each as stored, in order.

        A message whose `client_id` the session holds already is returned as
        stored instead of being stored again.
        """
        ...


class TokenStore(Protocol):
    """The owners' bearer tokens for the API, kept so that the token itself is never stored."""

    async def issue(self, owner_id: str, *, at: datetime) -> str:
        """Make a new token for the owner and return it (the only time it is shown)."""
        ...

    async def owner_of(self, token: str) -> str | None:
        """The owner a token belongs to, or None for a token nobody was given."""
        ...

    async def any(self) -> bool:
        """Whether any owner has a token at all."""
        ...

    async def ever(self) -> bool:
        """Whether any owner ever had a token: one now, or one made and revoked since."""
        ...
