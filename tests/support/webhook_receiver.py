"""A real local HTTP receiver for webhook and apprise deliveries, for tests and process tests.

In a test (the server runs in a background thread)::

    with WebhookReceiver() as receiver:
        receiver.script(500, Respond(200, delay_s=0.5))
        ...  # POST to receiver.url
        receiver.wait_for(2)
        assert receiver.unique_keys() == {"round-1"}

Every request is recorded when it arrives, before it is answered. Answers come
from the script, in order, then the default (200). `hang()` holds every
unscripted request unanswered until `release()`; `stop()` closes held requests
without an answer, as a crashed receiver would.

As a process (the daemon's process tests)::

    python tests/support/webhook_receiver.py --port 0 --log requests.jsonl [--status 500] [--hang]

The process prints one line, ``RECEIVER_READY http://127.0.0.1:PORT/``, once it
accepts connections, appends each request to the log as one JSON line (flushed
when the request arrives), and exits 0 on SIGTERM or SIGINT. Control endpoints
script a running process: ``POST /_receiver/script`` (a JSON list of statuses or
{"status", "delay_s", "hang", "drop"} objects), ``POST /_receiver/hang``,
``POST /_receiver/release``, ``POST /_receiver/reset`` and
``GET /_receiver/requests``. They are never recorded.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

HOST = "127.0.0.1"
CONTROL_PREFIX = "/_receiver/"
SERVE_POLL_S = 0.02  # seconds between shutdown checks of the serving loop
SOCKET_TIMEOUT_S = 10.0  # seconds a silent client may hold a handler thread
DEFAULT_WAIT_S = 5.0  # seconds `wait_for` waits by default
SIGNAL_POLL_S = 0.1  # seconds between checks for SIGTERM in the process's main loop


@dataclass(frozen=True)
class Respond:
    """How to answer one request.

    Attributes:
        status: the HTTP status to answer with.
        delay_s: seconds to wait before answering (cut short by `stop()`).
        hang: hold the request unanswered until `release()` (or `stop()`).
        drop: close the connection without any answer.
        headers: extra response headers, e.g. a Location for a redirect.
    """

    status: int = 200
    delay_s: float = 0.0
    hang: bool = False
    drop: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, item: Any) -> Respond:
        """Read a script item: a bare status or an object with the fields above."""
        if isinstance(item, int):
            return cls(status=item)
        return cls(**item)


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as it arrived.

    Attributes:
        method: the HTTP method.
        path: the request path with its query.
        headers: header values by lower-case name.
        body: the raw body bytes.
        json: the parsed body, or None when it is not JSON.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any

    def header(self, name: str) -> str | None:
        """A header's value by case-insensitive name, or None."""
        return self.headers.get(name.lower())

    def to_json(self) -> dict[str, Any]:
        """The JSON-line form: the body as text and as base64, for exact checks."""
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body.decode("utf-8", errors="replace"),
            "body_b64": base64.b64encode(self.body).decode("ascii"),
            "json": self.json,
        }


class WebhookReceiver:
    """A threaded HTTP server on 127.0.0.1 that records requests and answers as scripted."""

    def __init__(self, *, port: int = 0, log: Path | None = None) -> None:
        """Bind the server; it accepts connections from here on and answers after `start()`.

        Args:
            port: the port to listen on; 0 picks a free one.
            log: a JSON Lines file to append every request to.
        """
        self._log = log
        self._cond = threading.Condition()
        self._received: list[ReceivedRequest] = []
        self._script: deque[Respond] = deque()
        self._hang_all = False
        self._release_generation = 0
        self._stopping = threading.Event()
        self._server = _Server(self, port)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, ending in a slash."""
        return f"http://{HOST}:{self.port}/"

    def url_for(self, path: str) -> str:
        """The URL of `path` (with or without a leading slash) on this server."""
        return self.url + path.lstrip("/")

    @property
    def received(self) -> list[ReceivedRequest]:
        """Every recorded request, oldest first (a copy)."""
        with self._cond:
            return list(self._received)

    def unique_keys(self) -> set[str]:
        """The distinct Idempotency-Key values received."""
        return {key for r in self.received if (key := r.header("Idempotency-Key")) is not None}

    def script(self, *items: int | Respond) -> None:
        """Queue answers for the next requests, in order; a bare int is a status."""
        with self._cond:
            self._script.extend(Respond(item) if isinstance(item, int) else item for item in items)

    def hang(self) -> None:
        """Hold every unscripted request unanswered until `release()` or `stop()`."""
        with self._cond:
            self._hang_all = True

    def release(self) -> None:
        """Answer every held request now, and stop holding new ones."""
        with self._cond:
            self._hang_all = False
            self._release_generation += 1
            self._cond.notify_all()

    def reset(self) -> None:
        """Forget recorded requests and the script; release held requests."""
        self.release()
        with self._cond:
            self._received.clear()
            self._script.clear()

    def wait_for(self, count: int, timeout_s: float = DEFAULT_WAIT_S) -> list[ReceivedRequest]:
        """Block until at least `count` requests have arrived.

        Args:
            count: how many requests to wait for.
            timeout_s: seconds to wait at most.

        Returns:
            Every recorded request.

        Raises:
            TimeoutError: fewer than `count` arrived in time.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._received) >= count, timeout_s):
                raise TimeoutError(
                    f"{len(self._received)} of {count} requests arrived within {timeout_s}s"
                )
            return list(self._received)

    def start(self) -> WebhookReceiver:
        """Start answering in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SERVE_POLL_S},
            name=f"webhook-receiver-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop at once: held and delayed requests are closed unanswered, threads joined."""
        with self._cond:
            self._stopping.set()
            self._cond.notify_all()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        # Joins every handler thread; each one returns promptly now that
        # `_stopping` is set.
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _arrived(self, request: ReceivedRequest) -> tuple[Respond, int]:
        with self._cond:
            self._received.append(request)
            if self._log is not None:
                line = json.dumps(request.to_json(), ensure_ascii=False)
                with self._log.open("a", encoding="utf-8") as log:
                    log.write(line + "\n")
            self._cond.notify_all()
            respond = self._script.popleft() if self._script else Respond(hang=self._hang_all)
            return respond, self._release_generation

    def _hold(self, respond: Respond, generation: int) -> bool:
        """Wait as `respond` asks; False when the receiver stopped meanwhile."""
        if respond.delay_s > 0 and self._stopping.wait(respond.delay_s):
            return False
        if respond.hang:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stopping.is_set() or self._release_generation > generation
                )
        return not self._stopping.is_set()

    def _control(self, command: str, body: bytes) -> Any:
        if command == "script":
            self.script(*(Respond.from_json(item) for item in json.loads(body or b"[]")))
        elif command == "hang":
            self.hang()
        elif command == "release":
            self.release()
        elif command == "reset":
            self.reset()
        elif command == "requests":
            return [r.to_json() for r in self.received]
        else:
            raise KeyError(command)
        return {"ok": True}


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on close, so a stopped receiver leaves no
    # thread behind to write into a test that has moved on.
    daemon_threads = False
    block_on_close = True

    def __init__(self, receiver: WebhookReceiver, port: int) -> None:
        self.receiver = receiver
        super().__init__((HOST, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout, a killed daemon) is the point of
        # many tests, not a receiver bug worth a traceback on stderr.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # One request per connection: nothing stays open when the receiver stops.
    protocol_version = "HTTP/1.0"
    timeout = SOCKET_TIMEOUT_S

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        # Tests read `received`; access lines on stderr would only be noise.
        return

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        receiver = self.server.receiver
        if self.path.startswith(CONTROL_PREFIX):
            try:
                answer = receiver._control(self.path.removeprefix(CONTROL_PREFIX), body)
            except (KeyError, TypeError, ValueError) as error:
                self._answer(400, {"error": f"{type(error).__name__}: {error}"})
            else:
                self._answer(200, answer)
            return
        request = ReceivedRequest(
            method=self.command,
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
            json=_parse_json(body),
        )
        respond, generation = receiver._arrived(request)
        if respond.drop or not receiver._hold(respond, generation):
            # Close without a status line, as a crashed receiver would.
            self.close_connection = True
            return
        self._answer(respond.status, {"ok": 200 <= respond.status < 300}, respond.headers)

    def _answer(self, status: int, document: Any, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(document, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the receiver as a process until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks one")
    parser.add_argument("--log", type=Path, help="JSON Lines file to append each request to")
    parser.add_argument(
        "--status",
        type=int,
        action="append",
        default=[],
        help="answer the next request with this status; repeat for a sequence",
    )
    parser.add_argument("--hang", action="store_true", help="hold unscripted requests unanswered")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with WebhookReceiver(port=args.port, log=args.log) as receiver:
        receiver.script(*args.status)
        if args.hang:
            receiver.hang()
        print(f"RECEIVER_READY {receiver.url}", flush=True)
        # A timed wait, so the signal handler gets to run between waits.
        while not stop.wait(SIGNAL_POLL_S):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
