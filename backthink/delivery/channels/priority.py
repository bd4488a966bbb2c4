"""How each urgency reaches a service through apprise: its priority setting, per scheme.

apprise's `notify()` takes no priority; a service's priority is a setting of
its URL. An apprise channel therefore registers its URL once per urgency,
each with the service's own setting for it, and picks one per push. The
values follow one rule: routine is the service's normal alert, warning one
step up where there is one, critical the highest level that does not make
the owner acknowledge it. A setting the owner wrote into the URL is kept:
they chose it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final
from urllib.parse import quote, unquote

from backthink.models import Urgency

Values = tuple[str, str, str]
"""A setting's value for routine, warning and critical."""

_BY_SCHEME: Final[Mapping[str, Mapping[str, Values]]] = MappingProxyType(
    {
        "ntfy": {"priority": ("default", "high", "max")},
        "gotify": {"priority": ("5", "8", "10")},
        "pover": {"priority": ("0", "0", "1")},
        "bark": {"level": ("active", "timeSensitive", "critical")},
        "join": {"priority": ("0", "1", "2")},
        "prowl": {"priority": ("0", "1", "2")},
        "psafer": {"priority": ("0", "1", "2")},
        "spush": {"priority": ("3", "4", "5")},
        "lametric": {"priority": ("info", "warning", "critical")},
        "growl": {"priority": ("0", "1", "2")},
        # Telegram has no priority, only a silent flag: a routine message arrives quietly.
        "tgram": {"silent": ("yes", "no", "no")},
        # E-mail: headers (`+Name` is apprise's way to add one).
        "mailto": {"+X-Priority": ("3", "3", "1"), "+Importance": ("normal", "normal", "high")},
        # JSON, form and XML receivers get the urgency as a field of its own.
        "json": {":urgency": ("routine", "warning", "critical")},
        "form": {":urgency": ("routine", "warning", "critical")},
        "xml": {":urgency": ("routine", "warning", "critical")},
    }
)
# The secure variant of a scheme is set like the plain one.
_SECURE_ALIASES: Final = frozenset(
    {"ntfys", "gotifys", "barks", "psafers", "lametrics", "mailtos", "jsons", "forms", "xmls"}
)
_RANK: Final = {Urgency.ROUTINE: 0, Urgency.WARNING: 1, Urgency.CRITICAL: 2}


def settings_for(scheme: str) -> Mapping[str, Values]:
    """The URL settings that carry urgency for a scheme (empty for a service without one)."""
    scheme = scheme.lower()
    if scheme in _SECURE_ALIASES:
        scheme = scheme[:-1]
    return _BY_SCHEME.get(scheme, {})


def url_for(url: str, urgency: Urgency) -> str:
    """The channel's URL for pushes of `urgency`; unchanged for services without a priority."""
    scheme = url.partition("://")[0]
    for name, values in settings_for(scheme).items():
        url = with_setting(url, name, values[_RANK[urgency]])
    return url


def with_setting(url: str, name: str, value: str) -> str:
    """`url` with setting `name` added, unless the URL already sets it; all else kept as written.

    Reads the query as apprise does, not as urllib does: it starts at the
    first `?` (a `#` is part of a channel name, never a fragment), pairs are
    split at `&` or `;`, keys are compared without case, and nothing is
    decoded or re-encoded (apprise keeps `+` as `+`, and tokens rely on it).
    """
    base, sep, query = url.partition("?")
    wanted = name.strip().lower()
    pairs = [pair for pair in query.replace(";", "&").split("&") if pair] if sep else []
    if any(unquote(pair.partition("=")[0]).strip().lower() == wanted for pair in pairs):
        return url
    pairs.append(f"{quote(name, safe='+:')}={quote(value, safe='')}")
    return f"{base}?{'&'.join(pairs)}"
