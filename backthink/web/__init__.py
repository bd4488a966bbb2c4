"""The daemon's own page: a day's rounds on a timeline, each round in full, memories, pause.

Imported only when `[web] listen` is set; a daemon without the page never loads it.
"""

from __future__ import annotations

from backthink.web.listen import WebServer, open_page, start_web
from backthink.web.server import build_asgi

__all__ = ["WebServer", "build_asgi", "open_page", "start_web"]
