"""OpenAI-compatible servers already running on this machine, found on their usual ports.

`init --detect` offers them, and `check` names one when the configured
endpoint does not answer. Only loopback is asked, each port once, briefly:
`GET /v1/models`, whose answer also names the models the server has.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from backthink.endpoint.wire import ModelList

# The usual ports of local servers, in the order they are offered.
KNOWN_PORTS: tuple[tuple[int, str], ...] = (
    (11434, "Ollama"),
    (8080, "llama.cpp"),
    (1234, "LM Studio"),
    (8000, "vLLM"),
)
PORTS_ENV = "BACKTHINK_DETECT_PORTS"
"""A space-separated list of ports to ask instead (a server on a port of its own)."""
PROBE_TIMEOUT_S = 1.5  # seconds each server gets to answer
MAX_BODY_BYTES = 1_000_000  # bytes of a model list read at most
MAX_MODELS = 20  # models named per server at most


@dataclass(frozen=True)
class LocalServer:
    """One server that answered: where, what it usually is, and the models it lists."""

    base_url: str
    kind: str
    models: tuple[str, ...]


def ports_to_ask(env: Mapping[str, str]) -> list[tuple[int, str]]:
    """The known ports, or those `BACKTHINK_DETECT_PORTS` names."""
    named = env.get(PORTS_ENV, "").split()
    if not named:
        return list(KNOWN_PORTS)
    kinds = dict(KNOWN_PORTS)
    return [(int(p), kinds.get(int(p), "a model server")) for p in named if p.isdigit()]


async def find_local_servers(ports: Sequence[tuple[int, str]]) -> list[LocalServer]:
    """Ask every port at once; the servers that listed their models, in the ports' order."""
    found = await asyncio.gather(*(asyncio.to_thread(_ask, port, kind) for port, kind in ports))
    return [server for server in found if server is not None]


def _ask(port: int, kind: str) -> LocalServer | None:
    base_url = f"http://127.0.0.1:{port}/v1"
    # No proxy: this asks this machine, whatever the environment says about proxies.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url}/models", timeout=PROBE_TIMEOUT_S) as answer:
            body = answer.read(MAX_BODY_BYTES)
    except (OSError, urllib.error.URLError, ValueError):
        return None
    try:
        listed = ModelList.model_validate_json(body)
    except ValidationError:
        return None
    return LocalServer(base_url, kind, tuple(entry.id for entry in listed.data[:MAX_MODELS]))
