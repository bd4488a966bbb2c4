"""The doors for chat apps: the session API, the push stream, and the OpenAI-compatible relay.

Imported only when `[api] listen` is set; a daemon without the API never loads it.
"""

from __future__ import annotations

from backthink.api.server import Api, ApiDoors, open_api

__all__ = ["Api", "ApiDoors", "open_api"]
