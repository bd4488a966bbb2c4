"""A small W3C WebDriver client over HTTP, for driving headless Chromium through chromedriver.

Only what the page's tests need: a session, navigation, finding elements by
CSS, their text and attributes, clicks, screenshots. Debian's `chromium` and
`chromium-driver` packages provide the browser and the driver; `browser()`
skips the test, saying why, when either is missing.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

CHROMIUM = Path("/usr/bin/chromium")
ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"  # the W3C web element identifier
DRIVER_START_TIMEOUT_S = 20.0  # seconds for chromedriver to answer /status
REQUEST_TIMEOUT_S = 60.0  # seconds for one WebDriver command (a page load included)
HEADLESS_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")


class WebDriverError(AssertionError):
    """A WebDriver command failed; the message carries the driver's error."""


class Element:
    """One element of the current page."""

    def __init__(self, browser: Browser, element_id: str) -> None:
        self._browser = browser
        self.id = element_id

    def _path(self, tail: str) -> str:
        return f"element/{self.id}/{tail}"

    @property
    def text(self) -> str:
        """The element's rendered text."""
        return str(self._browser.command("GET", self._path("text")))

    def attribute(self, name: str) -> str | None:
        """An attribute's value, or None."""
        value = self._browser.command("GET", self._path(f"attribute/{name}"))
        return None if value is None else str(value)

    def click(self) -> None:
        """Click it as a user would (follows links, submits forms)."""
        self._browser.command("POST", self._path("click"), {})

    def find_all(self, css: str) -> list[Element]:
        """Descendants matching a CSS selector."""
        found = self._browser.command(
            "POST", self._path("elements"), {"using": "css selector", "value": css}
        )
        return [Element(self._browser, item[ELEMENT_KEY]) for item in found]


class Browser:
    """One WebDriver session."""

    def __init__(self, client: httpx2.Client, session_id: str) -> None:
        self._client = client
        self.session_id = session_id

    def command(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one command of this session and return its `value`."""
        url = f"/session/{self.session_id}/{path}"
        response = self._client.request(method, url, json=body)
        value = response.json().get("value")
        if response.status_code != 200:
            raise WebDriverError(f"{method} {path}: {response.status_code} {value}")
        return value

    def get(self, url: str) -> None:
        """Load a page and wait for it."""
        self.command("POST", "url", {"url": url})

    @property
    def url(self) -> str:
        """The current page's address."""
        return str(self.command("GET", "url"))

    def find_all(self, css: str) -> list[Element]:
        """Elements of the page matching a CSS selector."""
        found = self.command("POST", "elements", {"using": "css selector", "value": css})
        return [Element(self, item[ELEMENT_KEY]) for item in found]

    def find(self, css: str) -> Element:
        """The first element matching a CSS selector (fails when there is none)."""
        found = self.find_all(css)
        if not found:
            raise WebDriverError(f"no element matches {css!r} on {self.url}")
        return found[0]

    def alert_open(self) -> bool:
        """Whether a JavaScript dialog (alert, confirm) is showing."""
        response = self._client.get(f"/session/{self.session_id}/alert/text")
        return response.status_code == 200

    def screenshot(self, path: Path) -> None:
        """Save the viewport as a PNG."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.command("GET", "screenshot")))

    def resize(self, width: int, height: int) -> None:
        """Set the window's outer size in CSS pixels."""
        self.command("POST", "window/rect", {"width": width, "height": height})


IMPLICIT_WAIT_MS = 10_000  # milliseconds the driver looks for an element before it gives up
PAGE_LOAD_MS = 60_000  # milliseconds a page may take to load


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(client: httpx2.Client, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DRIVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WebDriverError(f"chromedriver exited with {proc.returncode}")
        try:
            if client.get("/status").json()["value"]["ready"]:
                return
        except (httpx2.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise WebDriverError(f"chromedriver did not start within {DRIVER_START_TIMEOUT_S:g} s")


def missing() -> str | None:
    """Why no browser test can run here, or None when Chromium and its driver are installed."""
    if shutil.which("chromedriver") is None:
        return "chromedriver not installed (Debian: apt-get install chromium-driver)"
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        return "chromium not installed (Debian: apt-get install chromium)"
    return None


@contextmanager
def browser(*, javascript: bool = True) -> Iterator[Browser]:
    """Start chromedriver and one headless Chromium session; end both afterwards.

    `javascript=False` turns scripts off for every page, as a reader who
    disabled them would have it.
    """
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    driver = shutil.which("chromedriver")
    assert driver is not None
    port = _free_port()
    proc = subprocess.Popen(
        [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    profile = tempfile.mkdtemp(prefix="backthink-chromium-")
    try:
        with httpx2.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT_S
        ) as client:
            _wait_ready(client, proc)
            options: dict[str, Any] = {
                "args": [*HEADLESS_ARGS, f"--user-data-dir={profile}", "--window-size=1280,900"],
            }
            if CHROMIUM.exists():
                options["binary"] = str(CHROMIUM)
            if not javascript:
                options["prefs"] = {"profile.managed_default_content_settings.javascript": 2}
            # The driver waits for an element to appear (a page still loading on a busy
            # machine) before it answers that there is none.
            timeouts = {"implicit": IMPLICIT_WAIT_MS, "pageLoad": PAGE_LOAD_MS}
            caps = {
                "capabilities": {
                    "alwaysMatch": {"goog:chromeOptions": options, "timeouts": timeouts}
                }
            }
            response = client.post("/session", json=caps)
            value = response.json()["value"]
            if response.status_code != 200:
                raise WebDriverError(f"new session: {value}")
            session = Browser(client, value["sessionId"])
            try:
                yield session
            finally:
                client.delete(f"/session/{session.session_id}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
