"""SqlTokenStore: the API's bearer tokens, each kept as the SHA-256 digest of the token.

A token is 32 random bytes, so a plain digest is as hard to reverse as the
token is to guess; no slow key derivation is needed, and looking one up is one
primary-key read. The token itself is shown once, when it is made.

That a token has existed at all is kept for good, as a mark of no owner
(`TOKEN_MADE`), written with the first token and again by every revoke: a
loopback API is open without a token only while none was ever made, and
revoking the last one must not reopen it.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import bindparam, delete, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlmodel import col, select

from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import ApiTokenRow, MarkRow

_OWNER_OF = select(col(ApiTokenRow.owner_id)).where(col(ApiTokenRow.digest) == bindparam("digest"))
TOKEN_PREFIX = "bt_"
TOKEN_BYTES = 32  # random bytes in a token
FLEET = "*"  # the owner of a mark about the whole database: no owner id begins with it
TOKEN_MADE = "api.token_made"  # the mark that a token was made, when the first one was
_MADE = select(col(MarkRow.at)).where(
    col(MarkRow.owner_id) == FLEET, col(MarkRow.name) == TOKEN_MADE
)
_ANY = select(col(ApiTokenRow.digest)).limit(1)


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token, as stored."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class SqlTokenStore:
    """The owners' bearer tokens in the `api_token` table."""

    def __init__(self, db: Database) -> None:
        """Use `db`, which must already be migrated (see `open_store`)."""
        self._db = db

    async def issue(self, owner_id: str, *, at: datetime) -> str:
        """Make a new token for the owner, store its digest, and return the token (once)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
        values = {"digest": token_digest(token), "owner_id": owner_id, "created_at": at}

        def store(conn: Connection) -> None:
            conn.execute(insert(ApiTokenRow), values)
            _remember(conn, at)

        with store_errors("could not store the token"):
            await self._db.write(store)
        return token

    async def owner_of(self, token: str) -> str | None:
        """The owner a token belongs to, or None for a token nobody was given."""
        params = {"digest": token_digest(token)}
        with store_errors("could not read tokens"):
            return await self._db.read(lambda c: c.execute(_OWNER_OF, params).scalar_one_or_none())

    async def any(self) -> bool:
        """Whether any owner has a token now."""
        with store_errors("could not read tokens"):
            return await self._db.read(lambda c: c.execute(_ANY).first()) is not None

    async def ever(self) -> bool:
        """Whether any owner ever had a token: one now, or one made and revoked since."""

        def read(conn: Connection) -> bool:
            # A token made before the mark was kept still counts while it exists.
            return conn.execute(_MADE).first() is not None or conn.execute(_ANY).first() is not None

        with store_errors("could not read tokens"):
            return await self._db.read(read)

    async def count(self, owner_id: str) -> int:
        """How many tokens the owner has."""
        query = select(col(ApiTokenRow.digest)).where(col(ApiTokenRow.owner_id) == owner_id)
        with store_errors("could not read tokens"):
            return len(await self._db.read(lambda c: c.execute(query).all()))

    async def revoke(self, owner_id: str) -> int:
        """Delete every token of the owner; return how many there were.

        The mark that a token existed is kept (written now, should the tokens
        predate it), so the API stays closed.
        """
        made = select(col(ApiTokenRow.created_at)).where(col(ApiTokenRow.owner_id) == owner_id)
        statement = delete(ApiTokenRow).where(col(ApiTokenRow.owner_id) == owner_id)

        def run(conn: Connection) -> int:
            times = conn.execute(made).scalars().all()
            if times:
                _remember(conn, min(times))
            return int(conn.execute(statement).rowcount)

        with store_errors("could not delete tokens"):
            return await self._db.write(run)


def _remember(conn: Connection, at: datetime) -> None:
    """Mark that a token was made at `at`, unless it is marked already (the first time stays)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    values = {"owner_id": FLEET, "name": TOKEN_MADE, "at": at}
    conn.execute(dialect.insert(MarkRow).values(values).on_conflict_do_nothing())
