"""The page's HTML, built from plain data: no templates, no build step, no script needed.

Every function returns a string; every outside value goes through `esc`.
Forms are plain POST forms, links plain links, so the whole page works with
JavaScript off; the one script only reloads today's page when a new round
is recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from backthink.host.status import Status
from backthink.models import Memory, MemoryKind, Outcome
from backthink.records import RoundRecord
from backthink.web.day import WIDTH, DayLine
from backthink.web.words import esc, local_time, reason_words

OUTCOMES = (Outcome.DELIVERED, Outcome.SUPPRESSED, Outcome.SKIPPED, Outcome.FAILED)
_ROW_Y = {Outcome.DELIVERED: 34, Outcome.SUPPRESSED: 46, Outcome.SKIPPED: 58, Outcome.FAILED: 70}
PAUSE_CHOICES = (
    ("", "until resumed"),
    ("1h", "for 1 hour"),
    ("8h", "for 8 hours"),
    ("1d", "for a day"),
)
BODY_PREVIEW = 80  # characters of a message shown in the rounds table


def layout(title: str, body: str, *, refresh: str | None = None) -> str:
    """The whole document around a page's body; `refresh` is the newest round id to watch."""
    watch = "" if refresh is None else f' data-refresh="1" data-newest="{esc(refresh)}"'
    script = '<script src="/static/refresh.js" defer></script>' if refresh is not None else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · backthink</title>"
        f'<link rel="stylesheet" href="/static/page.css">{script}</head>'
        f"<body{watch}>"
        '<nav><a href="/">today</a> <a href="/memory">journal &amp; memories</a> '
        '<a href="/api/status">status JSON</a></nav>'
        f"<main>{body}</main></body></html>\n"
    )


def timeline_svg(line: DayLine, tz: ZoneInfo, quiet_label: str) -> str:
    """The day as a drawing: quiet hours and owner messages as bands, rounds as linked marks."""
    parts = [
        f'<svg class="timeline" viewBox="-12 0 {WIDTH + 24:g} 110" role="img" '
        f'aria-label="rounds of {esc(line.day.isoformat())}">',
        f'<rect class="day" x="0" y="24" width="{WIDTH:g}" height="60"></rect>',
    ]
    for span in line.quiet:
        parts.append(
            f'<rect class="quiet" x="{span.x0}" y="24" width="{span.x1 - span.x0:.2f}" height="60">'
            f"<title>quiet hours {esc(quiet_label)}</title></rect>"
        )
    for span in line.owner:
        parts.append(
            f'<rect class="owner" x="{span.x0}" y="77" width="{max(span.x1 - span.x0, 2):.2f}" '
            'height="6"><title>the owner was writing</title></rect>'
        )
    for hour in range(0, 25, 3):
        at = datetime.combine(line.day, time(0), tzinfo=tz) + timedelta(hours=hour)
        x = line.x(at) if hour < 24 else WIDTH
        parts.append(f'<line class="tick" x1="{x}" x2="{x}" y1="84" y2="90"></line>')
        parts.append(f'<text class="hour" x="{x}" y="104">{hour:02d}</text>')
    for mark in line.marks:
        r = mark.record
        y = _ROW_Y[mark.outcome]
        tip = f"{local_time(r.started_at, tz)} {r.outcome.value} / {r.reason}"
        parts.append(
            f'<a class="mark outcome-{esc(r.outcome.value)}" href="/rounds/{esc(r.id)}" '
            f'data-outcome="{esc(r.outcome.value)}" data-round="{esc(r.id)}">'
            f'<circle cx="{mark.x}" cy="{y}" r="5"></circle><title>{esc(tip)}</title></a>'
        )
        if r.outcome is Outcome.DELIVERED and r.channel:
            parts.append(
                f'<text class="label" x="{mark.x}" y="18" data-round="{esc(r.id)}">'
                f"{esc(r.channel)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def legend(records: Iterable[RoundRecord]) -> str:
    """How many rounds ended each way, in the marks' colours."""
    counts = Counter(r.outcome for r in records)
    items = "".join(
        f'<li class="outcome-{o.value}"><span class="dot"></span>{o.value} '
        f'<b data-count="{o.value}">{counts[o]}</b></li>'
        for o in OUTCOMES
    )
    return (
        f'<ul class="legend">{items}<li class="quiet-key">quiet hours</li>'
        '<li class="owner-key">the owner writing</li></ul>'
    )


def rounds_table(records: Sequence[RoundRecord], tz: ZoneInfo) -> str:
    """Every round of the day as a row linking to its detail."""
    if not records:
        return '<p class="empty">No rounds this day.</p>'
    rows = []
    for r in records:
        body = r.body or ""
        if len(body) > BODY_PREVIEW:
            body = body[: BODY_PREVIEW - 1] + "…"
        rows.append(
            f'<tr class="outcome-{esc(r.outcome.value)}">'
            f'<td><a href="/rounds/{esc(r.id)}">'
            f"{esc(local_time(r.started_at, tz, '%H:%M:%S'))}</a></td>"
            f"<td>{esc(r.trigger)}</td><td>{esc(r.outcome.value)}</td>"
            f'<td title="{esc(reason_words(r.outcome, r.reason))}">{esc(r.reason)}</td>'
            f"<td>{esc(r.channel or '')}</td><td>{esc(body)}</td></tr>"
        )
    return (
        '<table class="rounds"><thead><tr><th>time</th><th>trigger</th><th>outcome</th>'
        "<th>reason</th><th>channel</th><th>message</th></tr></thead>"
        f"<tbody>{''.join(reversed(rows))}</tbody></table>"
    )


def status_panel(status: Status, tz: ZoneInfo) -> str:
    """The daemon's status and the pause and resume forms."""
    last = status.last_round
    last_text = "none yet"
    if last is not None:
        at = local_time(last.started_at, tz, "%m-%d %H:%M")
        last_text = f"{last.outcome.value} / {last.reason} at {at}"
    nxt = status.next_heartbeat
    rows = [
        ("pause", status.pause.describe(tz)),
        ("next heartbeat", local_time(nxt, tz) if nxt is not None else "-"),
        ("last round", last_text),
        ("deliveries", f"{status.pending_deliveries} pending"),
        (
            "channels",
            ", ".join(f"{name} {health}" for name, health in status.channels.items()) or "none",
        ),
        ("model", status.model),
    ]
    cells = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    choices = "".join(
        f'<option value="{esc(v)}">{esc(label)}</option>' for v, label in PAUSE_CHOICES
    )
    state = "paused" if status.pause.paused else "running"
    return (
        f'<section class="status {state}" id="status"><h2>Status: {state}</h2><dl>{cells}</dl>'
        '<form method="post" action="/pause" class="inline">'
        f'<select name="for" aria-label="how long">{choices}</select> '
        '<button type="submit" id="pause">Pause</button></form> '
        '<form method="post" action="/resume" class="inline">'
        '<button type="submit" id="resume">Resume</button></form></section>'
    )


def day_page(
    line: DayLine,
    records: Sequence[RoundRecord],
    status: Status,
    tz: ZoneInfo,
    *,
    quiet_label: str,
    today: bool,
    newest: str | None = None,
) -> str:
    """A day's timeline, its rounds, and the status with its forms.

    On today's page, `newest` is the id of the newest round of all: the script
    reloads the page once another one is recorded.
    """
    day = line.day
    prev, nxt = day - timedelta(days=1), day + timedelta(days=1)
    heading = f"{'Today, ' if today else ''}{day.strftime('%A %d %B %Y')}"
    nav = (
        f'<p class="days"><a href="/day/{prev.isoformat()}" rel="prev">← {prev.isoformat()}</a>'
        f' <a href="/day/{nxt.isoformat()}" rel="next">{nxt.isoformat()} →</a></p>'
    )
    body = (
        f"<h1>{esc(heading)}</h1>{nav}{timeline_svg(line, tz, quiet_label)}{legend(records)}"
        f"{status_panel(status, tz)}<h2>Rounds</h2>{rounds_table(records, tz)}"
    )
    return layout(day.isoformat(), body, refresh=(newest or "") if today else None)


def memory_page(thoughts: Sequence[Memory], memories: Sequence[Memory], tz: ZoneInfo) -> str:
    """The journal of thoughts and the long-term memories, each with a forget button."""

    def items(found: Sequence[Memory]) -> str:
        if not found:
            return '<p class="empty">None.</p>'
        rows = []
        for m in found:
            link = f' <a href="/rounds/{esc(m.round_id)}">round</a>' if m.round_id else ""
            rows.append(
                f'<li data-memory="{esc(m.id)}"><time>'
                f"{esc(local_time(m.created_at, tz, '%Y-%m-%d %H:%M'))}</time> "
                f'<span class="kind">{esc(m.kind.value)}</span> <span class="text">{esc(m.text)}'
                f"</span>{link}"
                f'<form method="post" action="/memory/{esc(m.id)}/forget" class="inline">'
                '<button type="submit" class="forget">forget</button></form></li>'
            )
        return f'<ul class="memories">{"".join(rows)}</ul>'

    kinds = ", ".join(k.value for k in (MemoryKind.NOTE, MemoryKind.PROFILE))
    body = (
        "<h1>Journal and memories</h1><h2>Thoughts</h2>"
        "<p>The companion's private thought of each round, newest first.</p>"
        f"{items(thoughts)}<h2>Memories</h2><p>Kept facts ({esc(kinds)}), newest first.</p>"
        f"{items(memories)}"
    )
    return layout("memory", body)


def message_page(title: str, text: str, *, status: int) -> str:
    """A short page for an error or a refusal."""
    return layout(title, f"<h1>{esc(title)}</h1><p>{esc(text)}</p><p>({status})</p>")
