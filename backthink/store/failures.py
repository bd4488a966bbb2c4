"""Database failures as one-line StoreErrors that never carry SQL parameters nor passwords.

SQLAlchemy's own messages quote the statement and its bound parameters, and
those hold private message text, so only the driver's first line is kept and
the original exception is not chained. libpq names the server it could not
reach, never the password; a URL or `password=` setting quoted in a driver's
message is masked all the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError, StatementError

from backthink.errors import StoreError
from backthink.redact import MASK, redact_urls

_PASSWORD_SETTING = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def describe(exc: BaseException) -> str:
    """Return the first line of what went wrong, without statement, parameters or input."""
    if isinstance(exc, ValidationError):
        # Pydantic quotes the input value by default, and inputs are private text.
        first_error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first_error["loc"])
        return f"{where}: {first_error['msg']}" if where else first_error["msg"]
    cause: BaseException = exc
    if isinstance(exc, StatementError) and exc.orig is not None:
        cause = exc.orig
    lines = str(cause).strip().splitlines()
    # An SQLAlchemy error without a driver cause starts with its own text, and
    # any "[SQL: ...]" part follows on later lines or after the first bracket.
    first = lines[0].split(" [SQL:")[0].strip() if lines else ""
    first = _PASSWORD_SETTING.sub(rf"\g<1>{MASK}", redact_urls(first))
    return first or type(cause).__name__


@contextmanager
def store_errors(action: str) -> Iterator[None]:
    """Turn a database failure inside the block into `StoreError("<action>: <cause>")`.

    Args:
        action: what was being done, e.g. "could not store message".

    Raises:
        StoreError: the block raised an SQLAlchemy error, or stored data did
            not validate as a model.
    """
    try:
        yield
    except (SQLAlchemyError, ValidationError) as exc:
        # "from None" keeps the statement and its parameters out of tracebacks.
        raise StoreError(f"{action}: {describe(exc)}") from None
