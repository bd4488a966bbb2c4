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

# Query keys whose value is a credential, compared lower-case with "-" read as "_".
_SECRET_KEYS: Final = frozenset(
    {"key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "signature"}
)
_SECRET_SUFFIXES: Final = ("_key", "_token", "_secret", "_password", "_signature")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL inside free text runs until whitespace, a quote, or a closing bracket or comma.
_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>()\[\]{},]+")
_QUERY_PAIR: Final = re.compile(r"(?P<key>[^&;=#]+)=(?P<value>[^&;#]*)")


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
    masked = _QUERY_PAIR.sub(
        lambda m: f"{m['key']}={MASK}" if _is_secret(m["key"]) and m["value"] else m[0], query
    )
    return f"{path}?{masked}{hash_mark}{fragment}"


def _is_secret(key: str) -> bool:
    name = key.strip().lower().replace("-", "_")
    return name in _SECRET_KEYS or name.endswith(_SECRET_SUFFIXES) or name == "apikey"
