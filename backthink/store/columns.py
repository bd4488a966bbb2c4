"""Column types of the tables: datetimes that always come back timezone-aware in UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.engine import Dialect
from sqlalchemy.types import DateTime, TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Store aware datetimes as UTC and return them as aware UTC datetimes.

    PostgreSQL keeps the instant in a `timestamptz`. SQLite has no time zone
    type and would hand back naive values, so the instant is stored there as
    naive UTC text of fixed width (which also sorts chronologically) and the
    UTC zone is put back on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Convert to UTC; refuse naive values, whose instant is unknown."""
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError("naive datetime: the store needs timezone-aware values")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime whatever the database gave back."""
        if value is None:
            return None
        if value.utcoffset() is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
