"""Run K real rounds against a model endpoint and print the fail-safe figures of what happened."""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from live_helpers import DEFAULT_MODEL, MAX_TOKENS, Checked, LiveWorkdir, run_checked

from backthink.decision.failsafe import (
    BODY_TOO_LONG,
    CONFLICTING_DECISIONS,
    EMPTY_BODY,
    EMPTY_REPLY,
    NO_DECISION,
    NOTHING_TO_SAY,
)
from backthink.decision.footer import parse_footer

TRIGGERS = ("heartbeat", "startup")
# A reply that has no single clear decision token in its footer.
UNPARSEABLE = frozenset({NO_DECISION, CONFLICTING_DECISIONS, EMPTY_REPLY, NOTHING_TO_SAY})


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the rounds, print the report; exit 1 on an invariant violation."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--rounds", type=int, default=20, help="how many rounds (K)")
    parser.add_argument(
        "--language", choices=("zh", "en", "both"), default="both", help="prompt templates"
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name sent with requests")
    parser.add_argument("--replies", action="store_true", help="print every raw reply too")
    parser.add_argument(
        "--dir",
        type=Path,
        help="keep the working folders (databases with every raw reply) here; "
        "emptied first (default: a temporary folder, removed afterwards)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    languages = ["zh", "en"] if args.language == "both" else [args.language]

    with _folder(args.dir) as tmp:
        workdirs = {}
        for language in languages:
            path = Path(tmp) / language
            path.mkdir()
            workdirs[language] = LiveWorkdir(path, args.base_url, language, args.model)
            workdirs[language].seed()
        probe = workdirs[languages[0]].cli("check", check=False)
        if probe.returncode != 0:
            print(f"report: the endpoint does not answer: {probe.stderr.strip()}", file=sys.stderr)
            return 1
        started = time.monotonic()
        rounds: list[tuple[str, Checked]] = []
        # One language after the other: consecutive requests then share the persona and
        # history prefix, which the server's prompt cache reuses instead of re-reading.
        plan = [languages[i * len(languages) // args.rounds] for i in range(args.rounds)]
        for i, language in enumerate(plan):
            trigger = TRIGGERS[i % len(TRIGGERS)]
            checked = run_checked(workdirs[language], trigger)
            rounds.append((language, checked))
            r = checked.record
            print(
                f"  {i + 1:>3}/{args.rounds} {language} {trigger:<9} {r.outcome.value}/{r.reason}",
                file=sys.stderr,
            )
            if args.replies:
                print(f"      raw: {r.raw_reply!r}", file=sys.stderr)
        elapsed = time.monotonic() - started
    print(render(rounds, args.model, args.base_url, elapsed))
    return 1 if any(c.violations for _, c in rounds) else 0


def render(rounds: list[tuple[str, Checked]], model: str, base_url: str, elapsed: float) -> str:
    """The report: footer, decision, gate and cost figures over all rounds."""
    k = len(rounds)
    answered = [(lang, c) for lang, c in rounds if c.record.raw_reply is not None]
    decisions = {c.record.id: parse_footer(c.record.raw_reply or "") for _, c in answered}

    def parseable(c: Checked) -> bool:
        d = decisions.get(c.record.id)
        return d is not None and not UNPARSEABLE & set(d.problems)

    def chose_push(c: Checked) -> bool:
        # A push token whose body then failed the body rules still counts as a choice to push.
        d = decisions.get(c.record.id)
        failed_body = d is not None and bool({EMPTY_BODY, BODY_TOO_LONG} & set(d.problems))
        return parseable(c) and d is not None and (d.push or failed_body)

    lines = [
        f"live report: {k} rounds, model {model!r} at {base_url}, {elapsed:.0f} s",
        "gate: quiet hours off, no rate limits (footer and body rules in full)",
        "",
        f"{'':<24}{'all':>12}"
        + "".join(f"{lang:>12}" for lang in sorted({lang for lang, _ in rounds})),
    ]

    def row(label: str, test: Callable[[Checked], bool]) -> str:
        cells = [_share([c for _, c in rounds], test)]
        for language in sorted({lang for lang, _ in rounds}):
            cells.append(_share([c for lang, c in rounds if lang == language], test))
        return f"{label:<24}" + "".join(f"{cell:>12}" for cell in cells)

    lines.append(row("model answered", lambda c: c.record.raw_reply is not None))
    lines.append(row("footer parseable", parseable))
    lines.append(row("chose push", chose_push))
    lines.append(row("delivered", lambda c: c.record.outcome.value == "delivered"))
    lines.append(row(f"hit max_tokens ({MAX_TOKENS})", _hit_max))

    outcomes = Counter(f"{c.record.outcome.value}/{c.record.reason}" for _, c in rounds)
    lines += ["", "gate outcomes:"]
    lines += [f"  {name:<28}{n:>4}  {n / k:>5.0%}" for name, n in outcomes.most_common()]
    problems = Counter(p for d in decisions.values() for p in d.problems)
    lines += ["", "footer problems:" + ("" if problems else " none")]
    lines += [f"  {name:<28}{n:>4}" for name, n in problems.most_common()]
    urgencies = Counter(
        (c.record.urgency.value if c.record.urgency else "routine")
        for _, c in rounds
        if chose_push(c)
    )
    if urgencies:
        chosen = ", ".join(f"{u} {n}" for u, n in urgencies.most_common())
        lines += ["", f"urgency of chosen pushes: {chosen}"]

    latencies = [c.record.latency_ms for _, c in answered if c.record.latency_ms is not None]
    prompt = [c.record.prompt_tokens for _, c in answered if c.record.prompt_tokens is not None]
    completion = [
        c.record.completion_tokens for _, c in answered if c.record.completion_tokens is not None
    ]
    lines += [""]
    if latencies:
        lines.append(
            f"latency ms: mean {statistics.fmean(latencies):.0f}, "
            f"median {statistics.median(latencies):.0f}, max {max(latencies):.0f}"
        )
    if prompt and completion:
        lines.append(
            f"tokens: prompt mean {statistics.fmean(prompt):.0f}, "
            f"completion mean {statistics.fmean(completion):.0f}"
        )
    # The few replies with a readable decision are the interesting ones: show them whole.
    readable = [(lang, c) for lang, c in rounds if parseable(c)]
    if readable:
        lines += ["", "replies with a parseable footer (raw, then what was delivered):"]
        for lang, c in readable:
            r = c.record
            lines.append(f"  {lang} {r.trigger} {r.outcome.value}/{r.reason}: {r.raw_reply!r}")
            lines.append(f"    delivered: {c.delivered_text!r}")
    broken = [(lang, c) for lang, c in rounds if c.violations]
    lines.append(f"invariant violations: {len(broken)} of {k} rounds")
    for lang, c in broken:
        lines.append(f"  {lang} {c.record.id}: {c.violations}; raw {c.record.raw_reply!r}")
    return "\n".join(lines)


@contextmanager
def _folder(keep: Path | None) -> Iterator[str]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="backthink-report-") as tmp:
            yield tmp
        return
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    yield str(keep)


def _hit_max(c: Checked) -> bool:
    return c.record.completion_tokens is not None and c.record.completion_tokens >= MAX_TOKENS


def _share(items: list[Checked], test: Callable[[Checked], bool]) -> str:
    if not items:
        return "-"
    n = sum(1 for c in items if test(c))
    return f"{n}/{len(items)} {n / len(items):.0%}"


if __name__ == "__main__":
    sys.exit(main())
