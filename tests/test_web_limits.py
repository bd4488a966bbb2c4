"""The page's connections are bounded: a cap, an idle timeout, a reserve of descriptors for rounds.

In process, a real server on a free port: connections past the cap are
answered 503 and closed, idle or trickling ones are closed after the idle
time. As a process, the daemon under a small limit of open files: hundreds
of idle connections to its page leave its poke socket answering and its log
quiet.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from conftest import DaemonProcess, Workdir
from support.fake_openai import FakeOpenAI
from support.settings import BARE, DROP, make_settings

from backthink.host import poke
from backthink.host.app import AppOverrides, build_app
from backthink.store import VolatileStores
from backthink.testing import FakeClock, ScriptedModel
from backthink.web import WebServer, start_web

CAP = 4
IDLE_S = 0.5  # seconds: the idle timeout these tests run the page with
REQUEST_S = 1.0  # seconds: how long these tests give a request to arrive whole
WAIT_S = 10.0  # seconds any one read may take on a loaded machine


@pytest.fixture
async def page() -> AsyncIterator[WebServer]:
    """The page on a free loopback port, holding at most CAP connections."""
    # The shipped gate, quiet hours too: the page's limits do not depend on them.
    settings = make_settings(
        base=BARE, gate=DROP, state={"file": None}, web={"listen": "127.0.0.1:0"}
    )
    app = build_app(
        settings,
        VolatileStores.empty(),
        AppOverrides(model=ScriptedModel(), clock=FakeClock(), persona_prompt="你好"),
    )
    server = await start_web(app, "o", max_connections=CAP, idle_s=IDLE_S, request_s=REQUEST_S)
    try:
        yield server
    finally:
        await server.stop()


async def _open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), WAIT_S)


async def test_connections_past_the_cap_are_answered_503_and_closed(page: WebServer) -> None:
    """CAP idle connections are held; the next ones get a 503 and are closed at once."""
    held = [await _open(page.url) for _ in range(CAP)]
    await asyncio.sleep(0)  # let the server take them in
    extra_reader, extra_writer = await _open(page.url)
    # Answered 503 and closed: a held connection would instead be closed silently when idle.
    answer = await asyncio.wait_for(extra_reader.read(), WAIT_S)
    assert answer.startswith(b"HTTP/1.1 503 ")
    extra_writer.close()
    for _, writer in held:
        writer.close()


async def test_idle_and_trickling_connections_are_closed_then_the_page_serves(
    page: WebServer,
) -> None:
    """A silent connection is closed after the idle time, one trickling its headers answered 408."""
    silent_reader, silent_writer = await _open(page.url)
    trickle_reader, trickle_writer = await _open(page.url)
    started = time.perf_counter()

    async def trickle() -> None:
        for byte in b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 10_000:
            if trickle_writer.is_closing():
                return
            trickle_writer.write(bytes([byte]))
            try:
                await trickle_writer.drain()
            except ConnectionError:
                return
            await asyncio.sleep(IDLE_S / 10)

    dribbling = asyncio.create_task(trickle())
    assert await _closed_by_server(silent_reader) == b""
    assert (await _closed_by_server(trickle_reader)).startswith(b"HTTP/1.1 408 ")
    took = time.perf_counter() - started
    dribbling.cancel()
    assert took < 8 * REQUEST_S  # closed at the request's deadline, not held open
    silent_writer.close()
    trickle_writer.close()
    async with httpx2.AsyncClient() as client:
        response = await client.get(page.url, timeout=WAIT_S)
    assert response.status_code == 200


async def test_a_body_sent_a_byte_at_a_time_is_answered_408_and_frees_its_slot(
    page: WebServer,
) -> None:
    """Headers whole, then a body at a trickle: 408 at the deadline, every slot free again."""
    body = b"for=" + b"1" * 200
    host = page.url.removeprefix("http://").rstrip("/").encode()
    writers = []
    readers = []
    for _ in range(CAP):
        reader, writer = await _open(page.url)
        writer.write(
            b"POST /pause HTTP/1.1\r\nhost: %s\r\norigin: %s\r\n"
            b"content-type: application/x-www-form-urlencoded\r\ncontent-length: %d\r\n\r\n"
            % (host, page.url.rstrip("/").encode(), len(body))
        )
        readers.append(reader)
        writers.append(writer)

    async def trickle(writer: asyncio.StreamWriter) -> None:
        for byte in body:
            if writer.is_closing():
                return
            writer.write(bytes([byte]))
            try:
                await writer.drain()
            except ConnectionError:
                return
            await asyncio.sleep(REQUEST_S / 10)

    dribbling = [asyncio.create_task(trickle(w)) for w in writers]
    started = time.perf_counter()
    answers = [await _closed_by_server(r) for r in readers]
    took = time.perf_counter() - started
    for task in dribbling:
        task.cancel()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers
    assert took < 8 * REQUEST_S
    for writer in writers:
        writer.close()
    # Every slot was held by a slow body; all are free again for a plain request.
    async with httpx2.AsyncClient() as client:
        response = await client.get(page.url, timeout=WAIT_S)
    assert response.status_code == 200


@pytest.mark.slow
def test_idle_connections_to_the_page_leave_the_daemon_answering(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """With 128 files, 300 idle page connections: pokes answered, refusals logged once."""
    env = dict(
        daemon_env,
        BACKTHINK_WEB__LISTEN="127.0.0.1:0",
        BACKTHINK_SCHEDULE__HEARTBEAT="24h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
    )
    fake.default_reply = "[我决定:no_push]"
    daemon = DaemonProcess(workdir, env, open_files=128)
    idle: list[socket.socket] = []
    try:
        url = str(daemon.wait_for("web.ready")["url"])
        daemon.wait_for("daemon.ready")
        sock_path = workdir.path / "bt.sock"

        def poked() -> float:
            started = time.perf_counter()
            answer = asyncio.run(poke.poke(sock_path, "日程：组会", owner_id=None, timeout_s=30))
            assert answer["reason"] == "no_push"
            return time.perf_counter() - started

        normal_s = poked()
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        for _ in range(300):
            # Connected without waiting, as a flood does: the kernel queues what it can.
            connection = socket.socket()
            connection.setblocking(False)
            connection.connect_ex((host, int(port)))
            idle.append(connection)
        refused = daemon.wait_for("web.connections_refused")
        assert int(str(refused["count"])) >= 1
        assert poked() < 20 * normal_s + 1.0
    finally:
        for connection in idle:
            connection.close()
        assert daemon.stop() == 0, "".join(daemon.raw)
    storm = [line for line in daemon.raw if "out of system resource" in line]
    refusals = [e for e in daemon.seen if e.get("event") == "web.connections_refused"]
    assert len(storm) <= 1 and len(refusals) <= 2, "".join(daemon.raw[-20:])
    assert all(json.loads(line) for line in daemon.raw if line.startswith("{"))


@pytest.mark.slow
def test_idle_connections_to_the_poke_socket_leave_the_owners_commands_answering(
    workdir: Workdir, fake: FakeOpenAI, daemon_env: dict[str, str]
) -> None:
    """With 128 files and 300 idle connections on the poke socket, status and pokes answer."""
    env = dict(
        daemon_env,
        BACKTHINK_SCHEDULE__HEARTBEAT="24h",
        BACKTHINK_SCHEDULE__STARTUP_GREETING="false",
    )
    fake.default_reply = "[我决定:no_push]"
    daemon = DaemonProcess(workdir, env, open_files=128)
    idle: list[socket.socket] = []
    try:
        daemon.wait_for("daemon.ready")
        sock_path = str(workdir.path / "bt.sock")
        for _ in range(300):
            # Connected without waiting and never written to, as a flood does.
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.setblocking(False)
            connection.connect_ex(sock_path)
            idle.append(connection)
        daemon.wait_for("poke.connections_dropped")
        status = asyncio.run(poke.ask_status(Path(sock_path), owner_id=None, timeout_s=10))
        assert status is not None and status["running"] is True
        answer = asyncio.run(poke.poke(Path(sock_path), "日程：组会", owner_id=None, timeout_s=30))
        assert answer["reason"] == "no_push"
    finally:
        for connection in idle:
            connection.close()
        assert daemon.stop() == 0, "".join(daemon.raw)
    assert len([e for e in daemon.seen if e.get("event") == "poke.connections_dropped"]) <= 2
