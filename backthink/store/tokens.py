"""SqlTokenStore: the API's bearer tokens, each kept as the SHA-256 digest of the token.

A token is 32 random bytes, so a plain digest is as hard to reverse as the
token is to guess; no slow key derivation is needed, and looking one up is one
primary-key read. The token itself is shown once, when it is made.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import bindparam, delete, insert
from sqlmodel import col, select

from backthink.store.database import Database
from backthink.store.failures import store_errors
from backthink.store.tables import ApiTokenRow

_OWNER_OF = select(col(ApiTokenRow.owner_id)).where(col(ApiTokenRow.digest) == bindparam("digest"))
TOKEN_PREFIX = "bt_"
TOKEN_BYTES = 32  # random bytes in a token


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
        with store_errors("could not store the token"):
            await self._db.write(lambda c: c.execute(insert(ApiTokenRow), values))
        return token

    async def owner_of(self, token: str) -> str | None:
        """The owner a token belongs to, or None for a token nobody was given."""
        params = {"digest": token_digest(token)}
        with store_errors("could not read tokens"):
            return await self._db.read(lambda c: c.execute(_OWNER_OF, params).scalar_one_or_none())

    async def any(self) -> bool:
        """Whether any owner has a token at all."""
        query = select(col(ApiTokenRow.digest)).limit(1)
        with store_errors("could not read tokens"):
            return await self._db.read(lambda c: c.execute(query).first()) is not None

    async def count(self, owner_id: str) -> int:
        """How many tokens the owner has."""
        query = select(col(ApiTokenRow.digest)).where(col(ApiTokenRow.owner_id) == owner_id)
        with store_errors("could not read tokens"):
            return len(await self._db.read(lambda c: c.execute(query).all()))

    async def revoke(self, owner_id: str) -> int:
        """Delete every token of the owner; return how many there were."""
        statement = delete(ApiTokenRow).where(col(ApiTokenRow.owner_id) == owner_id)
        with store_errors("could not delete tokens"):
            return int(await self._db.write(lambda c: c.execute(statement).rowcount))
