"""Delivery channels against a real local receiver: web, signed webhook, apprise."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import hashlib
import hmac
import importlib.metadata
import itertools
import json
import logging
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx2
import pytest
from pydantic import SecretStr, TypeAdapter
from support.webhook_receiver import Respond, WebhookReceiver

from backthink.config import (
    AppriseChannelSettings,
    ChannelSettings,
    WebChannelSettings,
    WebhookChannelSettings,
)
from backthink.delivery.channels import (
    AppriseChannel,
    WebhookChannel,
    build_channels,
    sign,
    verify,
)
from backthink.delivery.channels.transport import network_error
from backthink.errors import ConfigError, DeliveryError
from backthink.models import Urgency
from backthink.records import OutgoingMessage

ROOT = Path(__file__).resolve().parent.parent
AWAIT_TIMEOUT_S = 5.0  # seconds any single await in these tests may take
PROCESS_TIMEOUT_S = 10.0  # seconds for the receiver process to start or stop
SHORT_TIMEOUT_S = 0.3  # seconds: the webhook timeout in timeout tests
SECRET = "s3cr3t-hmac-key"
TEXT = "今晚早点睡吧，明天还有组会 🌙"
TOKEN = "tok3n-SHOULD-NOT-LEAK"

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float = AWAIT_TIMEOUT_S) -> T:
    """Await with a deadline, so a hung channel fails the test instead of stalling it."""
    async with asyncio.timeout(seconds):
        return await awaitable


def outgoing(round_id: str = "round-1", text: str = TEXT) -> OutgoingMessage:
    """One message as a round hands it to a channel."""
    return OutgoingMessage(
        round_id=round_id,
        owner_id="o",
        persona_id="cyrene",
        persona_name="昔涟",
        text=text,
        urgency=Urgency.WARNING,
        created_at=datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
    )


def webhook(
    url: str, *, secret: str | None = None, timeout_s: float = AWAIT_TIMEOUT_S
) -> WebhookChannel:
    """A webhook channel named "phone"."""
    settings = WebhookChannelSettings(
        type="webhook",
        url=url,
        secret=SecretStr(secret) if secret is not None else None,
        timeout_s=timeout_s,
    )
    return WebhookChannel("phone", settings)


def apprise_channel(url: str) -> AppriseChannel:
    """An apprise channel named "chat"."""
    return AppriseChannel("chat", AppriseChannelSettings(type="apprise", url=SecretStr(url)))


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reach the local receiver directly even where a proxy is configured."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A fresh receiver for one test."""
    with WebhookReceiver() as started:
        yield started


# --- webhook: body and headers ------------------------------------------------


async def test_webhook_posts_the_exact_compact_utf8_body(receiver: WebhookReceiver) -> None:
    """The body is message.webhook_body() as compact JSON, non-ASCII kept as UTF-8."""
    message = outgoing()
    await within(webhook(receiver.url_for("/hook")).send(message))
    [request] = receiver.received
    expected = json.dumps(message.webhook_body(), ensure_ascii=False, separators=(",", ":"))
    assert request.method == "POST"
    assert request.path == "/hook"
    assert request.body == expected.encode("utf-8")
    assert TEXT.encode("utf-8") in request.body
    assert request.json == message.webhook_body()


async def test_webhook_sends_the_contract_headers(receiver: WebhookReceiver) -> None:
    """Content-Type, Idempotency-Key = round id and the backthink User-Agent are set."""
    await within(webhook(receiver.url).send(outgoing("round-42")))
    [request] = receiver.received
    assert request.header("Content-Type") == "application/json"
    assert request.header("Idempotency-Key") == "round-42"
    assert request.header("User-Agent") == f"backthink/{importlib.metadata.version('backthink')}"
    assert request.header("Authorization") is None


async def test_signature_verifies_with_the_secret(receiver: WebhookReceiver) -> None:
    """The signature header is sha256=<hex HMAC of the body> and verify() accepts it."""
    await within(webhook(receiver.url, secret=SECRET).send(outgoing()))
    [request] = receiver.received
    header = request.header("X-Backthink-Signature")
    assert header is not None
    digest = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert header == f"sha256={digest}"
    assert verify(request.body, SECRET, header)


async def test_signature_fails_with_wrong_secret_or_changed_body(
    receiver: WebhookReceiver,
) -> None:
    """verify() rejects the signature under another secret or over a modified body."""
    await within(webhook(receiver.url, secret=SECRET).send(outgoing()))
    [request] = receiver.received
    header = request.header("X-Backthink-Signature")
    assert header is not None
    assert not verify(request.body, "another-secret", header)
    raised = request.body.replace(b'"urgency":"warning"', b'"urgency":"critical"')
    assert raised != request.body
    assert not verify(raised, SECRET, header)
    assert not verify(request.body + b" ", SECRET, header)


async def test_no_signature_header_without_secret(receiver: WebhookReceiver) -> None:
    """Without a secret, no signature header is sent at all."""
    await within(webhook(receiver.url).send(outgoing()))
    [request] = receiver.received
    assert request.header("X-Backthink-Signature") is None


def test_sign_matches_a_published_hmac_vector() -> None:
    """sign() is plain HMAC-SHA256 (RFC 2104 test vector from Wikipedia)."""
    body = b"The quick brown fox jumps over the lazy dog"
    assert sign(body, "key") == (
        "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
    )


@pytest.mark.parametrize(
    "header",
    [
        "",
        "sha256=",
        "sha1=" + "0" * 40,
        "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8",
        "sha256=F7BC83F430538424B13298E6AA6FB143EF4D59A14946175997479DBC2D1A3CD8",
        "sha256=é",
    ],
)
def test_verify_rejects_malformed_headers(header: str) -> None:
    """verify() returns False (never raises) for a missing prefix, other case or junk."""
    body = b"The quick brown fox jumps over the lazy dog"
    assert verify(body, "key", header) is False


async def test_url_credentials_become_basic_auth(receiver: WebhookReceiver) -> None:
    """user:password in the URL is sent as Basic authorization; the query is kept."""
    url = f"http://bot:pa%40ss@127.0.0.1:{receiver.port}/hook?token={TOKEN}"
    await within(webhook(url).send(outgoing()))
    [request] = receiver.received
    assert request.path == f"/hook?token={TOKEN}"
    expected = base64.b64encode(b"bot:pa@ss").decode()
    assert request.header("Authorization") == f"Basic {expected}"


async def test_retries_carry_one_idempotency_key(receiver: WebhookReceiver) -> None:
    """Two attempts of one delivery carry the same Idempotency-Key."""
    receiver.script(500)
    channel = webhook(receiver.url)
    with pytest.raises(DeliveryError):
        await within(channel.send(outgoing("round-7")))
    await within(channel.send(outgoing("round-7")))
    assert len(receiver.received) == 2
    assert receiver.unique_keys() == {"round-7"}


# --- webhook: failures ----------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408, 425])
async def test_server_and_rate_limit_statuses_are_retryable(
    receiver: WebhookReceiver, status: int
) -> None:
    """5xx, 429, 408 and 425 fail with a retryable error naming the status."""
    receiver.script(status)
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url).send(outgoing()))
    assert caught.value.retryable is True
    assert caught.value.detail == f"HTTP {status}"
    assert caught.value.channel == "phone"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
async def test_other_client_errors_are_permanent(receiver: WebhookReceiver, status: int) -> None:
    """Any other 4xx fails for good: trying again would only repeat the refusal."""
    receiver.script(status)
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url).send(outgoing()))
    assert caught.value.retryable is False
    assert caught.value.detail == f"HTTP {status}"


async def test_redirects_are_not_followed(receiver: WebhookReceiver) -> None:
    """A 3xx answer fails for good, and the redirect target is never posted to."""
    receiver.script(Respond(307, headers={"Location": receiver.url_for("/elsewhere")}))
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url_for("/hook")).send(outgoing()))
    assert caught.value.retryable is False
    assert caught.value.detail.startswith("HTTP 307")
    assert [r.path for r in receiver.received] == ["/hook"]


async def test_slow_receiver_times_out_retryably(receiver: WebhookReceiver) -> None:
    """A receiver slower than timeout_s fails with a retryable "timed out" error."""
    receiver.script(Respond(200, delay_s=AWAIT_TIMEOUT_S))
    started = time.monotonic()
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url, timeout_s=SHORT_TIMEOUT_S).send(outgoing()))
    assert time.monotonic() - started < AWAIT_TIMEOUT_S / 2
    assert caught.value.retryable is True
    assert caught.value.detail.startswith("timed out after 0.3s")


class StatusDribbler:
    """A real local receiver that reads the POST, then sends its status line a byte at a time."""

    DRIP_S = 0.05  # seconds between two bytes: far inside the socket's read timeout
    LINE = b"HTTP/1.1 200 OK" + b" " * 100_000  # never ends: there is no line break

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.closed = asyncio.Event()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            for byte in self.LINE:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(self.DRIP_S)
        except ConnectionError:
            pass
        finally:
            self.closed.set()
            writer.close()


async def test_a_receiver_dribbling_its_status_line_times_out_at_timeout_s(
    receiver: WebhookReceiver,
) -> None:
    """A byte every 50 ms never trips a read timeout; the attempt still ends at timeout_s."""
    started = time.perf_counter()
    await within(webhook(receiver.url, timeout_s=SHORT_TIMEOUT_S).send(outgoing()))
    normal_s = time.perf_counter() - started
    async with StatusDribbler() as url:
        started = time.perf_counter()
        with pytest.raises(DeliveryError) as caught:
            await within(webhook(url, timeout_s=SHORT_TIMEOUT_S).send(outgoing()))
        took = time.perf_counter() - started
    assert caught.value.retryable is True
    assert caught.value.detail.startswith("timed out after 0.3s")
    assert took <= SHORT_TIMEOUT_S + 20 * normal_s + StatusDribbler.DRIP_S * 4


class RawAnswer:
    """A real local receiver that reads the POST, then writes what `answer` writes, as it likes."""

    def __init__(self, answer: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.server: asyncio.Server | None = None
        self.closed = asyncio.Event()
        self._answer = answer

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await self._answer(writer)
        except ConnectionError:
            pass
        finally:
            self.closed.set()
            writer.close()


def endless(head: bytes, piece: bytes) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """An answer that writes `head`, then `piece` again and again, as fast as it is taken."""

    async def write(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        while True:
            writer.write(piece)
            await writer.drain()

    return write


async def test_an_endless_answer_body_is_never_read() -> None:
    """A 2xx is delivered at its headers: a body of any size, sent at any pace, is not read."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n"
    receiver = RawAnswer(endless(head, b"x" * 65_536))
    async with receiver as url:
        await within(webhook(url).send(outgoing()), seconds=AWAIT_TIMEOUT_S / 2)
        await within(receiver.closed.wait())


async def test_endless_headers_are_refused_before_the_deadline() -> None:
    """Headers past the parser's bound fail as an invalid answer, long before timeout_s."""
    receiver = RawAnswer(endless(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n"))
    async with receiver as url:
        started = time.monotonic()
        with pytest.raises(DeliveryError) as caught:
            await within(webhook(url, timeout_s=AWAIT_TIMEOUT_S).send(outgoing()))
        assert time.monotonic() - started < AWAIT_TIMEOUT_S / 2
        await within(receiver.closed.wait())
    assert caught.value.retryable is True
    assert caught.value.detail.startswith("invalid HTTP answer")


class NoThreads(ThreadPoolExecutor):
    """The event loop's executor, refusing work: whatever is handed to a thread fails the test."""

    def submit(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
        raise AssertionError(f"handed to a thread: {fn!r}")


async def test_an_attempt_runs_on_the_event_loop_alone(receiver: WebhookReceiver) -> None:
    """Sending, timing out and failing start no thread: the loop keeps the deadline."""
    asyncio.get_running_loop().set_default_executor(NoThreads())
    await within(webhook(receiver.url).send(outgoing()))
    receiver.script(Respond(200, delay_s=AWAIT_TIMEOUT_S))
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url, timeout_s=SHORT_TIMEOUT_S).send(outgoing()))
    assert caught.value.detail.startswith("timed out after 0.3s")
    assert len(receiver.received) == 2


async def test_connection_refused_is_retryable() -> None:
    """Nobody listening on the port fails with a retryable "connection refused"."""
    channel = webhook(f"http://127.0.0.1:{closed_port()}/hook")
    with pytest.raises(DeliveryError) as caught:
        await within(channel.send(outgoing()))
    assert caught.value.retryable is True
    assert caught.value.detail.startswith("connection refused")


async def test_dropped_connection_is_retryable(receiver: WebhookReceiver) -> None:
    """A receiver that closes the connection without answering fails retryably."""
    receiver.script(Respond(drop=True))
    with pytest.raises(DeliveryError) as caught:
        await within(webhook(receiver.url).send(outgoing()))
    assert caught.value.retryable is True
    assert caught.value.detail.startswith("connection closed without an answer")


def chained(*errors: BaseException) -> BaseException:
    """The first error, each raised from the next, as httpx2 raises its own from the socket's."""
    for outer, inner in itertools.pairwise(errors):
        outer.__cause__ = inner
    return errors[0]


ALL_FAILED = "All connection attempts failed"  # the OSError anyio raises over each address's


@pytest.mark.parametrize(
    ("errors", "detail"),
    [
        ((httpx2.ConnectError(""), OSError(ALL_FAILED), socket.gaierror(-2, "?")), "could not"),
        ((httpx2.ConnectError(""), OSError(ALL_FAILED), ConnectionRefusedError()), "connection r"),
        (
            (
                httpx2.ConnectError(""),
                OSError(ALL_FAILED),
                ExceptionGroup("all", [ConnectionRefusedError(), ConnectionRefusedError()]),
            ),
            "connection refused",
        ),
        ((httpx2.ReadError(""), ConnectionResetError(104, "reset")), "connection reset"),
        ((httpx2.RemoteProtocolError("Server disconnected"),), "connection closed without"),
        ((TimeoutError("timed out"),), "timed out after 10s"),
        ((httpx2.ReadTimeout("slow"),), "timed out after 10s"),
        ((httpx2.ConnectError(""), ssl.SSLCertVerificationError("bad cert")), "TLS certificate"),
        ((httpx2.RemoteProtocolError("bad"), ValueError("illegal status line")), "invalid HTTP"),
        ((httpx2.ConnectError(""), OSError(101, "Network is unreachable")), "network error (O"),
    ],
)
def test_network_failures_are_retryable_one_liners(
    errors: tuple[BaseException, ...], detail: str
) -> None:
    """DNS, TLS, reset and other network failures map to short retryable errors."""
    error = chained(*errors)
    mapped = network_error("phone", error, timeout_s=10, target="https://example.org:443")
    assert mapped.retryable is True
    assert mapped.detail.startswith(detail)
    assert mapped.detail.endswith("(https://example.org:443)")
    assert "\n" not in str(mapped)


async def test_errors_never_show_secret_text_or_url_secrets(receiver: WebhookReceiver) -> None:
    """Error strings name the host at most: no secret, text, password, path or query."""
    leaks = [SECRET, TEXT, "pa55word", TOKEN, "/hook"]
    receiver.script(500, 404, Respond(delay_s=AWAIT_TIMEOUT_S))
    ports = [receiver.port] * 3 + [closed_port()]
    urls = [f"http://bot:pa55word@127.0.0.1:{port}/hook?token={TOKEN}" for port in ports]
    errors: list[DeliveryError] = []
    for url in urls:
        channel = webhook(url, secret=SECRET, timeout_s=SHORT_TIMEOUT_S)
        with pytest.raises(DeliveryError) as caught:
            await within(channel.send(outgoing()))
        errors.append(caught.value)
    assert [e.detail.split(" (")[0] for e in errors] == [
        "HTTP 500",
        "HTTP 404",
        "timed out after 0.3s",
        "connection refused",
    ]
    for error in errors:
        shown = f"{error} {error.detail!r} {error.args!r}"
        assert not [leak for leak in leaks if leak in shown], shown
        assert "\n" not in shown
        assert error.__cause__ is None


@pytest.mark.parametrize(
    ("url", "secret", "key"),
    [
        ("http://127.0.0.1:notaport/hook", None, "channels.phone.url"),
        ("http://127.0.0.1:8080/hook", "", "channels.phone.secret"),
    ],
)
def test_unusable_webhook_settings_fail_at_build(url: str, secret: str | None, key: str) -> None:
    """A non-numeric port or an empty secret is a ConfigError naming the key."""
    with pytest.raises(ConfigError) as caught:
        webhook(url, secret=secret)
    assert str(caught.value).startswith(f"{key}: ")


# --- the receiver itself ----------------------------------------------------------


async def test_held_request_waits_for_release(receiver: WebhookReceiver) -> None:
    """A hanging receiver records the request at once and answers only when released."""
    receiver.hang()
    task = asyncio.create_task(webhook(receiver.url).send(outgoing()))
    await within(asyncio.to_thread(receiver.wait_for, 1))
    assert not task.done()
    receiver.release()
    await within(task)
    assert receiver.unique_keys() == {"round-1"}


async def test_stopping_the_receiver_drops_held_requests_quickly() -> None:
    """Stopping a receiver that holds a request is fast and leaves the client a retryable error."""
    receiver = WebhookReceiver().start()
    receiver.hang()
    task = asyncio.create_task(webhook(receiver.url).send(outgoing()))
    await within(asyncio.to_thread(receiver.wait_for, 1))
    started = time.monotonic()
    await within(asyncio.to_thread(receiver.stop))
    assert time.monotonic() - started < 1.0
    with pytest.raises(DeliveryError) as caught:
        await within(task)
    assert caught.value.retryable is True


def _call(url: str, body: bytes | None = None, key: str = "") -> tuple[int, bytes]:
    """POST (with a body) or GET a URL; return the status and the answer's body."""
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"} if key else {}
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=PROCESS_TIMEOUT_S) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_receiver_process_logs_requests_and_exits_on_sigterm(tmp_path: Path) -> None:
    """The process announces itself, answers as scripted, logs JSON lines, exits 0 on SIGTERM."""
    log = tmp_path / "requests.jsonl"
    command = [sys.executable, str(ROOT / "tests/support/webhook_receiver.py"), "--port", "0"]
    process = subprocess.Popen(
        [*command, "--log", str(log), "--status", "503"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        marker, url = process.stdout.readline().split()
        assert marker == "RECEIVER_READY"
        body = json.dumps({"text": TEXT}, ensure_ascii=False).encode()
        assert _call(url + "hook", body, key="round-9")[0] == 503
        assert _call(url + "_receiver/script", b'[{"status": 201}]')[0] == 200
        assert _call(url + "hook", body, key="round-9")[0] == 201
        status, listing = _call(url + "_receiver/requests")
        assert status == 200
        assert [r["headers"]["idempotency-key"] for r in json.loads(listing)] == ["round-9"] * 2
        entries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert [e["path"] for e in entries] == ["/hook", "/hook"]
        assert entries[0]["json"] == {"text": TEXT}
        assert base64.b64decode(entries[0]["body_b64"]) == body
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PROCESS_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=PROCESS_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


# --- apprise --------------------------------------------------------------------------


async def test_apprise_delivers_the_text(receiver: WebhookReceiver) -> None:
    """Through apprise's json:// URL the text arrives, titled with the persona's name."""
    channel = apprise_channel(f"json://127.0.0.1:{receiver.port}/notify")
    assert channel.connected is True
    await within(channel.send(outgoing()))
    [request] = receiver.received
    assert request.path == "/notify"
    assert request.json["message"] == TEXT
    assert request.json["title"] == "昔涟"


async def test_apprise_failure_is_retryable(receiver: WebhookReceiver) -> None:
    """A service answering 500 makes apprise fail, which is a retryable DeliveryError."""
    receiver.script(500)
    channel = apprise_channel(f"json://127.0.0.1:{receiver.port}/notify")
    with pytest.raises(DeliveryError) as caught:
        await within(channel.send(outgoing()))
    assert caught.value.retryable is True
    assert caught.value.detail == "apprise could not deliver"
    assert len(receiver.received) == 1


@pytest.mark.parametrize(
    "url", [f"nosuchservice://{TOKEN}@host", "tgram://", f"not a url {TOKEN}", ""]
)
def test_apprise_rejects_urls_it_cannot_parse_at_build(url: str) -> None:
    """An URL apprise does not understand is a ConfigError that never echoes the URL."""
    with pytest.raises(ConfigError) as caught:
        apprise_channel(url)
    assert str(caught.value) == "channels.chat.url: apprise does not understand this URL"
    assert TOKEN not in str(caught.value)


async def test_apprise_logs_nothing_that_could_hold_a_token(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """No apprise log record is emitted (so no URL or token) on a bad URL or a failed send."""
    seen: list[logging.LogRecord] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    caplog.set_level(logging.DEBUG)
    recorder = Recorder(logging.DEBUG)
    apprise_logger = logging.getLogger("apprise")
    apprise_logger.addHandler(recorder)
    try:
        with pytest.raises(ConfigError):
            apprise_channel(f"nosuchservice://{TOKEN}@host")
        channel = apprise_channel(f"json://bot:{TOKEN}@127.0.0.1:{closed_port()}/n?-key={TOKEN}")
        with pytest.raises(DeliveryError) as caught:
            await within(channel.send(outgoing()))
    finally:
        apprise_logger.removeHandler(recorder)
    assert TOKEN not in str(caught.value)
    assert seen == []
    assert not [r for r in caplog.records if r.name.startswith(("apprise", "urllib3"))]
    captured = capsys.readouterr()
    for output in (caplog.text, captured.out, captured.err):
        assert TOKEN not in output
        assert TEXT not in output


def test_apprise_is_imported_only_when_an_apprise_channel_is_built() -> None:
    """Building web and webhook channels never imports apprise (it is slow to import)."""
    code = (
        "import sys\n"
        "from backthink.delivery.channels import build_channels\n"
        "from backthink.config import WebChannelSettings, WebhookChannelSettings\n"
        "build_channels({'web': WebChannelSettings(),"
        " 'hook': WebhookChannelSettings(type='webhook', url='http://127.0.0.1:9/')})\n"
        "print('apprise' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=True,
        cwd=ROOT,
    )
    assert result.stdout.strip() == "False"


# --- build_channels -----------------------------------------------------------------------


def test_build_channels_keeps_config_order_and_types(receiver: WebhookReceiver) -> None:
    """Each sending channel is built with its own type, name and config order; web sends nothing."""
    raw = {
        "phone": {"type": "webhook", "url": receiver.url, "secret": SECRET},
        "web": {"type": "web"},
        "chat": {"type": "apprise", "url": f"json://127.0.0.1:{receiver.port}/"},
    }
    settings = TypeAdapter(dict[str, ChannelSettings]).validate_python(raw)
    channels = build_channels(settings)
    assert list(channels) == ["phone", "chat"]
    assert [type(c) for c in channels.values()] == [WebhookChannel, AppriseChannel]
    assert [c.name for c in channels.values()] == ["phone", "chat"]
    assert all(c.connected for c in channels.values())


def test_build_channels_reports_the_failing_key() -> None:
    """A bad apprise URL among good channels fails the build with that channel's key."""
    settings: dict[str, ChannelSettings] = {
        "web": WebChannelSettings(),
        "broken": AppriseChannelSettings(type="apprise", url=SecretStr("nosuchservice://x")),
    }
    with pytest.raises(ConfigError, match=r"^channels\.broken\.url: "):
        build_channels(settings)


# Markup and a line break that must arrive as written.
MARKUP = "记得 <b>带伞</b>，a<b 且 c>d\n第二行"


def pushed(text: str = MARKUP, *, urgency: Urgency, persona_name: str = "昔涟") -> OutgoingMessage:
    """A message of the given urgency."""
    return outgoing(text=text).model_copy(update={"urgency": urgency, "persona_name": persona_name})


@pytest.mark.parametrize(
    ("urgency", "priority"),
    [(Urgency.ROUTINE, None), (Urgency.WARNING, "high"), (Urgency.CRITICAL, "max")],
)
async def test_ntfy_gets_the_urgency_as_its_priority_and_the_text_as_written(
    receiver: WebhookReceiver, urgency: Urgency, priority: str | None
) -> None:
    """ntfy: routine at the default priority, warning high, critical max; markup stays text."""
    channel = apprise_channel(f"ntfy://127.0.0.1:{receiver.port}/backthink")
    await within(channel.send(pushed(urgency=urgency)))
    [request] = receiver.received
    assert request.header("x-priority") == priority
    assert request.json == {"topic": "backthink", "title": "昔涟", "message": MARKUP}


async def test_a_priority_written_into_the_url_is_kept(receiver: WebhookReceiver) -> None:
    """The owner's own `priority=` in the URL wins over the urgency's."""
    channel = apprise_channel(f"ntfy://127.0.0.1:{receiver.port}/backthink?priority=low")
    await within(channel.send(pushed(urgency=Urgency.CRITICAL)))
    [request] = receiver.received
    assert request.header("x-priority") == "low"


async def test_json_and_gotify_receivers_get_the_urgency(receiver: WebhookReceiver) -> None:
    """json:// carries the urgency as a field and the type; gotify:// as its priority."""
    await within(
        apprise_channel(f"json://127.0.0.1:{receiver.port}/n").send(
            pushed(urgency=Urgency.CRITICAL)
        )
    )
    await within(
        apprise_channel(f"gotify://127.0.0.1:{receiver.port}/tokentokentoken").send(
            pushed(urgency=Urgency.WARNING)
        )
    )
    as_json, as_gotify = receiver.received
    assert as_json.json["message"] == MARKUP
    assert (as_json.json["type"], as_json.json["urgency"]) == ("failure", "critical")
    assert (as_gotify.json["message"], as_gotify.json["priority"]) == (MARKUP, 8)


async def test_a_persona_without_a_name_titles_it_backthink(receiver: WebhookReceiver) -> None:
    """An empty persona name never sends an empty title."""
    channel = apprise_channel(f"json://127.0.0.1:{receiver.port}/n")
    await within(channel.send(pushed(urgency=Urgency.ROUTINE, persona_name="")))
    [request] = receiver.received
    assert request.json["title"] == "backthink"


class SmtpRecorder:
    """A minimal SMTP server on 127.0.0.1 that keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._server.accept()
        with conn, conn.makefile("rwb") as stream:

            def say(line: str) -> None:
                stream.write(line.encode() + b"\r\n")
                stream.flush()

            say("220 localhost")
            while line := stream.readline():
                verb = line.decode("ascii", "replace").split(" ", 1)[0].strip().upper()
                if verb == "DATA":
                    say("354 go on")
                    data = []
                    while (row := stream.readline()) not in (b".\r\n", b""):
                        data.append(row[1:] if row.startswith(b"..") else row)
                    self.messages.append(b"".join(data))
                    say("250 queued")
                elif verb == "QUIT":
                    say("221 bye")
                    return
                else:
                    say("250 ok")

    def close(self) -> None:
        self._server.close()
        self._thread.join(timeout=5)


async def test_email_is_plain_text_and_a_critical_one_is_marked_important() -> None:
    """mailto: one text/plain part with the words as written; critical sets the priority headers."""
    smtp = SmtpRecorder()
    try:
        url = (
            f"mailto://127.0.0.1:{smtp.port}?mode=insecure"
            "&to=me@example.invalid&from=bt@example.invalid"
        )
        await within(apprise_channel(url).send(pushed(urgency=Urgency.CRITICAL)))
    finally:
        smtp.close()
    [raw] = smtp.messages
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert message.get_content_type() == "text/plain"
    assert message.get_content().replace("\r\n", "\n").strip() == MARKUP
    assert (message["X-Priority"], message["Importance"]) == ("1", "high")
