"""Relay: the latency `POST /v1/chat/completions` through the daemon adds to the upstream call.

`backthink run` with `[api] listen` (its own process), the fake endpoint as
another process answering at once. A chat front-end's conversation grows one
turn per call (a user message, the reply), as in a real chat: each relayed call
reads the session's tail, stores the new user message and then the reply. The
same requests also go to the endpoint directly; direct and relayed calls
alternate over one kept-alive connection each, so a drift of the machine's
load hits both alike. The figure is median(relayed) - median(direct).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import median

import httpx2
from common import (
    BENCH_VAR,
    VENV_BIN,
    FakeServerProcess,
    Figure,
    api_daemon,
    clean_environ,
    exit_on_sigterm,
    fresh_dir,
    group_parser,
    percentile,
    print_figures,
    settings_doc,
    toml_config,
    write_figures,
    write_state_file,
)

GROUP = "relay"
TARGET_MS = 10.0  # the relay may add at most this much to a non-streamed call's median
WARMUP = 30  # untimed pairs of calls first
CALLS = 300  # timed pairs (direct, relayed)
QUICK_CALLS = 80
WINDOW = 20  # messages the front-end sends per call at most (plus its system prompt)
REPLY = "嗯嗯，我在呢，慢慢说。"
HTTP_TIMEOUT_S = 30.0
# The API lets an owner's clients make 5 requests a second, sustained; a pair of
# calls every PACE_S keeps the relayed ones under it (the pause is not timed).
PACE_S = 0.25


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


def run(*, quick: bool) -> list[Figure]:
    """Start the endpoint and the daemon, time both paths; return the figures."""
    env = clean_environ()
    calls = QUICK_CALLS if quick else CALLS
    work = fresh_dir(BENCH_VAR / "relay")
    with FakeServerProcess(reply=REPLY, log=BENCH_VAR / "logs" / "fake-relay.log") as fake:
        config = _config(work, fake.base_url)
        cli = [str(VENV_BIN / "backthink"), "--config", str(config)]
        with api_daemon(cli, cwd=work, env=env) as daemon:
            relay_url = daemon.url + "v1/chat/completions"
            direct_url = fake.base_url + "/chat/completions"
            direct, relayed = _measure(direct_url, relay_url, daemon.token, calls)
    added = median(relayed) - median(direct)
    return [
        Figure(GROUP, "direct call, median", f"{median(direct):.2f} ms", "", None),
        Figure(GROUP, "relayed call, median", f"{median(relayed):.2f} ms", "", None),
        Figure(
            GROUP,
            "added by the relay, median",
            f"{added:.2f} ms",
            f"<= {TARGET_MS:g} ms",
            added <= TARGET_MS,
        ),
        Figure(
            GROUP,
            "added by the relay, p90",
            f"{percentile(relayed, 90) - percentile(direct, 90):.2f} ms",
            "",
            None,
        ),
        Figure(GROUP, "calls timed per path", str(len(direct)), "", None),
    ]


def _measure(
    direct_url: str, relay_url: str, token: str, calls: int
) -> tuple[list[float], list[float]]:
    """Alternate direct and relayed calls of one growing conversation; milliseconds each."""
    history: list[dict[str, str]] = []
    direct: list[float] = []
    relayed: list[float] = []
    system = {"role": "system", "content": "你是昔涟，温柔地陪伴开拓者。"}
    with (
        httpx2.Client(timeout=HTTP_TIMEOUT_S) as upstream,
        httpx2.Client(
            timeout=HTTP_TIMEOUT_S, headers={"authorization": f"Bearer {token}"}
        ) as relay,
    ):
        for i in range(WARMUP + calls):
            history.append({"role": "user", "content": f"第{i}句：今天组会讲得还行"})
            body = {"model": "fake-model", "messages": [system, *history[-WINDOW:]]}
            # Half the pairs go relay-first, so neither path always runs on a warmer cache.
            order = [(upstream, direct_url, direct), (relay, relay_url, relayed)]
            if i % 2:
                order.reverse()
            for client, url, out in order:
                started = time.perf_counter()
                answer = client.post(url, json=body)
                elapsed = (time.perf_counter() - started) * 1000
                answer.raise_for_status()
                if i >= WARMUP:
                    out.append(elapsed)
            history.append({"role": "assistant", "content": REPLY})
            time.sleep(PACE_S)
    return direct, relayed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = group_parser(
        __doc__,
        quick=f"{QUICK_CALLS} timed pairs instead of {CALLS}",
        rebuild="accepted for symmetry; no cache",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures = run(quick=args.quick)
    print_figures("10. Relay (latency added to a non-streamed chat completion)", figures)
    write_figures(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
