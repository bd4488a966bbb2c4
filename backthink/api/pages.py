"""A page of `GET /v1/messages`, sent as the client reads it: bounded in memory, read or not.

A page may hold 1,000 messages and 8,000,000 characters. Built whole, it sat
in the daemon as a JSON body for as long as its client did not read it, and
sixty such clients held hundreds of megabytes. So a page is read from the
session `BATCH` messages (at most `BATCH_CHARS` characters) at a time, and
each message is sent as its own piece of the body: the server waits for the
client to take what was sent before it reads on, so an unread page holds a
socket's buffer and one batch, never the page.

A page without `after` (the newest messages) is first read whole, to find
where it begins; only its first message is kept, and the rest is read again
batch by batch once it is sent. A page that fits one batch is sent as read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from backthink.errors import StoreError
from backthink.models import SessionEntry

log = structlog.get_logger(__name__)

PAGE_MAX_CHARS = 8_000_000  # characters of text and images a page holds (one message at least)
BATCH = 100  # messages read from the session at a time while a page is sent
BATCH_CHARS = 64_000  # characters of text and images read at a time (one message at least)


class PageSource(Protocol):
    """Where a page is read from: the session store's `page`."""

    async def page(
        self,
        owner_id: str,
        *,
        after: int | None,
        limit: int,
        max_chars: int | None = None,
        every: bool = False,
    ) -> list[SessionEntry] | None:
        """Messages after `after`, oldest first (without it the newest `limit`); None: unknown.

        With `every`, superseded messages are among them too.
        """
        ...


def chars(entry: SessionEntry) -> int:
    """The characters a message counts for in a page: its text and its image."""
    return len(entry.message.text) + len(entry.message.image or "")


def encoded(entry: SessionEntry) -> bytes:
    """One message object as the page's JSON holds it (as Starlette's JSONResponse writes)."""
    return json.dumps(
        entry.to_json(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()


@dataclass
class Page:
    """A page under way: what was read and not sent yet, and how much more it may hold."""

    session: PageSource
    owner_id: str
    read: list[SessionEntry]
    left: int
    """Messages the page may still hold beyond those in `read`."""
    chars_left: int
    """Characters the page may still hold beyond those in `read`."""
    every: bool = False
    """Superseded messages are on the page too (`all=1`)."""

    @classmethod
    async def open(
        cls,
        session: PageSource,
        owner_id: str,
        *,
        after: int | None,
        limit: int,
        every: bool = False,
    ) -> Page | None:
        """The page's first batch read; None when `after` is not a message of the session.

        Raises:
            StoreError: the session cannot be read.
        """
        if after is not None:
            first = await session.page(
                owner_id, after=after, limit=min(limit, BATCH), max_chars=BATCH_CHARS, every=every
            )
            if first is None:
                return None
            left = limit - len(first)
            return cls(session, owner_id, first, left, _left(first, PAGE_MAX_CHARS), every)
        whole = await session.page(
            owner_id, after=None, limit=limit, max_chars=PAGE_MAX_CHARS, every=every
        )
        whole = whole or []
        if len(whole) <= BATCH and sum(chars(e) for e in whole) <= BATCH_CHARS:
            return cls(session, owner_id, whole, 0, 0, every)
        # Only where it begins is kept: the rest is read again as it is sent.
        first = whole[:1]
        return cls(session, owner_id, first, len(whole) - 1, _left(first, PAGE_MAX_CHARS), every)

    async def body(self) -> AsyncIterator[bytes]:
        """The page's JSON, `{"messages": [...]}`, a message at a time, read on as it is taken."""
        yield b'{"messages":['
        sent = 0
        cursor = None
        while True:
            for entry in self.read:
                yield encoded(entry) if sent == 0 else b"," + encoded(entry)
                sent += 1
                cursor = entry.message.id
            self.read = []
            if self.left <= 0 or self.chars_left <= 0 or cursor is None:
                break
            # A turn of the loop before reading on: once the client is gone, sending
            # returns at once and a read from a SQLite file does not wait either, so
            # without it the rest of the page would be read for nobody before the
            # server's cancellation could reach this body.
            await asyncio.sleep(0)
            try:
                batch = await self.session.page(
                    self.owner_id,
                    after=cursor,
                    limit=min(self.left, BATCH),
                    max_chars=min(self.chars_left, BATCH_CHARS),
                    every=self.every,
                )
            except StoreError as exc:
                # The answer began already: it is left unfinished, so no client takes
                # the messages it got for the whole page.
                log.warning("api.page_failed", owner_id=self.owner_id, error=str(exc))
                return
            if not batch:
                break
            if chars(batch[0]) > self.chars_left:
                # Past the page's characters: a page holds one large message, not one more.
                break
            self.read = batch
            self.left -= len(batch)
            self.chars_left = _left(batch, self.chars_left)
        yield b"]}"


def _left(entries: Sequence[SessionEntry], chars_left: int) -> int:
    """The characters a page may still hold once `entries` are in it."""
    return chars_left - sum(chars(e) for e in entries)
