"""Doors: what unread pages and slow bodies cost the daemon.

`backthink run` with `[api] listen` (its own process, this checkout's code),
the fake endpoint as another process. The owner's session holds 1,000
messages of about 7,900 characters, so a page of `limit=1000` is ~8 MB.

- Unread pages: 60 connections each ask for that page and, once its status
  line is in (the daemon began to send it), read nothing more (a receive
  buffer of 4 KiB each). The daemon's RSS (`VmRSS`) is read before (after
  one page was read whole), at its highest while they stay open, and after
  they close. Targets: growth < 100 MiB while open; after they close, within
  20 MiB of the baseline.
- Slow bodies: 256 connections (no token: any local process) each send a
  POST's headers and then its body a byte a second, reopened as soon as the
  daemon closes one (an attacker keeps them coming). Meanwhile a plain
  request (`GET /v1/messages?limit=1` with the owner's token, on a new
  connection) every 2 s for 20 s: its worst time from connecting to the
  last byte of its answer, and the statuses it got. Target: every plain
  request answered 200 within 1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx2
from common import (
    BENCH_VAR,
    ROOT,
    FakeServerProcess,
    Figure,
    api_daemon,
    clean_environ,
    exit_on_sigterm,
    fresh_dir,
    group_parser,
    print_figures,
    rss_kb,
    settings_doc,
    toml_config,
    write_figures,
    write_state_file,
)

GROUP = "doors"
MESSAGES = 1000  # messages in the session: one page of limit=1000
MESSAGE_CHARS = 7_900  # characters each: a page stays under PAGE_MAX_CHARS (8,000,000)
POST_BATCH = 100  # messages per POST (~800 KB, under api.max_body_bytes)
UNREAD_PAGES = 60  # connections that ask for a page and never read it
QUICK_UNREAD_PAGES = 20
RECEIVE_BUFFER = 4096  # bytes of kernel receive buffer asked for each unread connection
SLOW_BODIES = 256  # connections that send a body a byte a second
SLOW_BODY_BYTES = 100_000  # the body length they announce (never all sent)
PLAIN_EVERY_S = 2.0  # seconds between plain requests while the slow bodies run
PLAIN_FOR_S = 20.0  # seconds of plain requests (two rounds of the daemon's 10 s bound)
QUICK_PLAIN_FOR_S = 10.0
SETTLE_S = 2.0  # seconds the RSS must stay within SETTLE_KIB to count as settled
SETTLE_KIB = 1024
SETTLE_MAX_S = 30.0  # seconds to wait for it at most
GROWTH_TARGET_MIB = 100.0
AFTER_TARGET_MIB = 20.0
PLAIN_TARGET_S = 1.0
HTTP_TIMEOUT_S = 30.0
WORDS = (
    "the train was late again and the rain did not stop",
    "we talked about the trip, the budget and the old camera",
    "she finished the report before the deadline after all",
    "tomorrow the meeting starts at nine, bring the notes",
    "the cat slept on the keyboard for most of the afternoon",
)


def _config(work: Path, base_url: str) -> Path:
    state = work / "state.json"
    write_state_file(state, at=datetime.now(UTC))
    doc = settings_doc(
        base_url=base_url,
        db=work / "bt.db",
        state=state,
        schedule={"heartbeat": "6h", "jitter": "0s", "startup_greeting": False},
        daemon={"socket": str(work / "bt.sock")},
        api={"listen": "127.0.0.1:0"},
    )
    config = work / "backthink.toml"
    config.write_text(toml_config(doc), "utf-8")
    return config


def _text(rng: random.Random, i: int) -> str:
    parts = [f"message {i}:"]
    while sum(len(p) + 1 for p in parts) < MESSAGE_CHARS:
        parts.append(rng.choice(WORDS))
    return " ".join(parts)[:MESSAGE_CHARS]


def _seed(client: httpx2.Client) -> None:
    """Fill the session with MESSAGES long messages."""
    rng = random.Random(7)
    for start in range(0, MESSAGES, POST_BATCH):
        batch = [
            {"role": "user" if i % 2 else "assistant", "text": _text(rng, i)}
            for i in range(start, start + POST_BATCH)
        ]
        client.post("/v1/messages", json=batch).raise_for_status()


def _settled(pid: int, *, highest: bool) -> int:
    """The daemon's RSS (KiB) once it stops moving; with `highest`, the peak seen on the way."""
    deadline = time.monotonic() + SETTLE_MAX_S
    seen = [rss_kb(pid)]
    steady_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_kb(pid)
        if abs(now - seen[-1]) > SETTLE_KIB:
            steady_since = time.monotonic()
        seen.append(now)
        if time.monotonic() - steady_since >= SETTLE_S:
            break
    return max(seen) if highest else seen[-1]


def _unread_pages(port: int, token: str, pages: int, pid: int) -> tuple[int, int]:
    """Hold `pages` connections that ask for a page and read nothing: the RSS peak, then after."""
    request = (
        f"GET /v1/messages?limit={MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()
    held: list[socket.socket] = []
    try:
        for _ in range(pages):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.connect(("127.0.0.1", port))
            sock.sendall(request)
            held.append(sock)
        for sock in held:
            # Its status line, and nothing more: the daemon has begun to send that page.
            sock.settimeout(HTTP_TIMEOUT_S)
            status = sock.recv(len(b"HTTP/1.1 200"), socket.MSG_WAITALL)
            if status != b"HTTP/1.1 200":
                raise RuntimeError(f"an unread page was answered {status!r}")
        peak = _settled(pid, highest=True)
    finally:
        for sock in held:
            sock.close()
    return peak, _settled(pid, highest=False)


async def _slow_body(port: int, stop: asyncio.Event, seen: Counter[str]) -> None:
    """One attacker's connection, a body a byte a second, reopened whenever the daemon closes it.

    It sends no token (any local process can open a connection), so it spends
    nothing of the owner's rate limit: answered 401 at once, it goes on
    sending its body as long as the daemon keeps the connection. `seen`
    counts the statuses it is answered.
    """
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {SLOW_BODY_BYTES}\r\n\r\n"
    ).encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            writer.write(head)
            while not stop.is_set():
                writer.write(b" ")
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    answer = await asyncio.wait_for(reader.read(4096), 1.0)
                    if answer.startswith(b"HTTP/1.1 "):
                        seen[answer[9:12].decode()] += 1
                    if not answer:
                        break
        except OSError:
            pass
        finally:
            writer.close()


async def _plain(port: int, token: str) -> tuple[float, int]:
    """One plain request on a new connection: seconds to its whole answer, and its status."""
    request = (
        f"GET /v1/messages?limit=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    try:
        async with asyncio.timeout(HTTP_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(request)
                answer = await reader.read()
            finally:
                writer.close()
        status = int(answer.split(b" ", 2)[1])
    except (OSError, TimeoutError, IndexError, ValueError):
        status = 0
    return time.perf_counter() - started, status


async def _slow_bodies(
    port: int, token: str, plain_for_s: float
) -> tuple[list[float], list[int], Counter[str]]:
    """Keep SLOW_BODIES slow bodies coming while plain requests are timed."""
    stop = asyncio.Event()
    seen: Counter[str] = Counter()
    attackers = [asyncio.create_task(_slow_body(port, stop, seen)) for _ in range(SLOW_BODIES)]
    times: list[float] = []
    statuses: list[int] = []
    try:
        await asyncio.sleep(PLAIN_EVERY_S)  # every slow body is open and under way
        began = time.monotonic()
        while time.monotonic() - began < plain_for_s:
            took, status = await _plain(port, token)
            times.append(took)
            statuses.append(status)
            await asyncio.sleep(PLAIN_EVERY_S)
    finally:
        stop.set()
        await asyncio.gather(*attackers, return_exceptions=True)
    return times, statuses, seen


def run(*, quick: bool) -> list[Figure]:
    """Start the endpoint and the daemon, hold the connections, read the figures."""
    env = clean_environ()
    # This checkout's code, whatever the venv's editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    pages = QUICK_UNREAD_PAGES if quick else UNREAD_PAGES
    plain_for_s = QUICK_PLAIN_FOR_S if quick else PLAIN_FOR_S
    work = fresh_dir(BENCH_VAR / "doors")
    with FakeServerProcess(
        reply="[我决定:no_push]", log=BENCH_VAR / "logs" / "fake-doors.log"
    ) as fake:
        config = _config(work, fake.base_url)
        cli = [sys.executable, "-m", "backthink", "--config", str(config)]
        with api_daemon(cli, cwd=work, env=env) as daemon:
            token, pid = daemon.token, daemon.proc.pid
            port = int(daemon.url.rstrip("/").rsplit(":", 1)[1])
            with httpx2.Client(
                base_url=daemon.url,
                timeout=HTTP_TIMEOUT_S,
                headers={"authorization": f"Bearer {token}"},
            ) as client:
                _seed(client)
                # One page read whole first: what serving a page always costs is in the baseline.
                page = client.get("/v1/messages", params={"limit": MESSAGES})
                page.raise_for_status()
                page_mib = len(page.content) / 2**20
                del page
            baseline = _settled(pid, highest=False)
            peak, after = _unread_pages(port, token, pages, pid)
            times, statuses, seen = asyncio.run(_slow_bodies(port, token, plain_for_s))
    growth = (peak - baseline) / 1024
    left = (after - baseline) / 1024
    worst = max(times)
    answered = all(s == 200 for s in statuses) and worst < PLAIN_TARGET_S
    shown = ", ".join(f"{s}" for s in sorted(set(statuses)))
    return [
        Figure(GROUP, "one page of limit=1000", f"{page_mib:.1f} MiB", "", None),
        Figure(GROUP, "daemon RSS before", f"{baseline / 1024:.1f} MiB", "", None),
        Figure(
            GROUP,
            f"RSS growth, {pages} unread pages open",
            f"{growth:.1f} MiB",
            f"< {GROWTH_TARGET_MIB:g} MiB",
            growth < GROWTH_TARGET_MIB,
        ),
        Figure(
            GROUP,
            "RSS after they close, over baseline",
            f"{left:.1f} MiB",
            f"< {AFTER_TARGET_MIB:g} MiB",
            left < AFTER_TARGET_MIB,
        ),
        Figure(
            GROUP,
            f"plain request with {SLOW_BODIES} slow bodies, worst",
            f"{worst * 1000:.0f} ms ({len(times)} requests: {shown})",
            f"200 within {PLAIN_TARGET_S:g} s",
            answered,
        ),
        Figure(
            GROUP,
            "answers the slow bodies got",
            ", ".join(f"{status} x{count}" for status, count in sorted(seen.items())) or "none",
            "",
            None,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__,
        quick=f"{QUICK_UNREAD_PAGES} unread pages and {QUICK_PLAIN_FOR_S:g} s of plain requests",
        rebuild="accepted for symmetry; no cache",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures("11. Doors (unread pages, slow bodies)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
