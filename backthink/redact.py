"""Mask credentials in URLs before they are shown or logged.

Endpoints and webhooks are often configured with their credentials inside the
URL (`https://user:pass@host/v1`, `...?api_key=...`). Anything that prints or
logs a URL passes it through here first. Only the credentials change, so the
rest still tells the reader which endpoint is meant.
"""

from __future__ import annotations

import re
from typing import Final

MASK: Final = "***"
SCHEME_CHARS: Final = 32  # characters of a URL scheme found inside free text

# Query keys whose value is a credential, compared lower-case with "-" read as "_".
_SECRET_KEYS: Final = frozenset(
    {"key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "signature"}
)
_SECRET_SUFFIXES: Final = ("_key", "_token", "_secret", "_password", "_signature")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL inside free text runs until whitespace, a quote, or a closing bracket or comma.
# The scheme is bounded (real ones are a few letters): an unbounded one would be read
# again from every letter of a long word that is not followed by "://".
_URL_IN_TEXT: Final = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.-]{{0,{SCHEME_CHARS - 1}}}://[^\s\"'<>()\[\]{{}},]+"
)
_QUERY_SEPARATOR: Final = re.compile(r"([&;])")


def redact_url(url: str) -> str:
    """Return `url` with its userinfo replaced by `***` and secret query values masked.

    Args:
        url: any text; only a `scheme://...` URL is changed.

    Returns:
        The same URL, e.g. `https://***@host/v1?api_key=***&model=x`; anything that is
        not a URL comes back unchanged.
    """
    scheme = _SCHEME.match(url)
    if scheme is None:
        return url
    start = scheme.end()
    rest = url[start:]
    netloc_end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    netloc, tail = rest[:netloc_end], rest[netloc_end:]
    userinfo, at, host = netloc.rpartition("@")
    if at and userinfo:
        netloc = f"{MASK}@{host}"
    return url[:start] + netloc + _redact_query(tail)


def redact_urls(text: str) -> str:
    """Redact every URL that appears inside a piece of free text, as `redact_url` does."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: redact_url(match[0]), text)


def _redact_query(tail: str) -> str:
    path, question, rest = tail.partition("?")
    if not question:
        return tail
    query, hash_mark, fragment = rest.partition("#")
    masked = "".join(_redact_pair(part) for part in _QUERY_SEPARATOR.split(query))
    return f"{path}?{masked}{hash_mark}{fragment}"


def _redact_pair(part: str) -> str:
    """One `key=value` of a query with a secret value masked; separators come back as they are.

    The key is the first run of characters other than "=" that a "=" follows,
    the value everything after that "=".
    """
    lead = len(part) - len(part.lstrip("="))
    key, equals, value = part[lead:].partition("=")
    if not equals or not key or not value or not _is_secret(key):
        return part
    return f"{part[:lead]}{key}={MASK}"


def _is_secret(key: str) -> bool:
    name = key.strip().lower().replace("-", "_")
    return name in _SECRET_KEYS or name.endswith(_SECRET_SUFFIXES) or name == "apikey"
