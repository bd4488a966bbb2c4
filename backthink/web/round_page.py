"""One round's page: its decision, reply, delivery, tools, what it was shown, its request.

Every outside value goes through `esc`; the page is built from the round's
record and what the stores hold now.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from backthink.decision.reply import Reply
from backthink.models import Memory, MemoryRef
from backthink.records import Delivery, RoundRecord
from backthink.web.pages import layout
from backthink.web.words import esc, local_time, reason_words


def _pre(text: str, cls: str) -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text else '<p class="empty">(none)</p>'


def round_page(
    record: RoundRecord,
    tz: ZoneInfo,
    *,
    delivery: Delivery | None,
    written: Sequence[Memory],
    shown: Sequence[Shown],
    request: dict[str, Any] | None,
    request_problem: str | None,
    reply: Reply | None,
    servers: Sequence[str] = (),
) -> str:
    """Everything known about one round; `reply` is its raw reply read (None: no reply).

    `servers` are the configured MCP servers, left out of the request shown.
    """
    r = record
    day = local_time(r.started_at, tz, "%Y-%m-%d")
    facts = [
        ("started", local_time(r.started_at, tz, "%Y-%m-%d %H:%M:%S %Z")),
        ("finished", local_time(r.finished_at, tz, "%H:%M:%S")),
        ("trigger", r.trigger),
        ("model", r.model or "-"),
        (
            "tokens",
            "-" if r.prompt_tokens is None else f"{r.prompt_tokens} / {r.completion_tokens}",
        ),
        ("latency", "-" if r.latency_ms is None else f"{r.latency_ms:.0f} ms"),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    sections = [
        f"<h1>Round <code>{esc(r.id[:12])}</code></h1>"
        f'<p class="days"><a href="/day/{esc(day)}">← {esc(day)}</a></p>',
        f'<p class="verdict outcome-{esc(r.outcome.value)}"><b id="outcome">{esc(r.outcome.value)}'
        f' / {esc(r.reason)}</b> — <span id="reason-words">'
        f"{esc(reason_words(r.outcome, r.reason))}</span></p>",
        f"<dl>{dl}</dl>",
        _decision(r),
        _reply(r.raw_reply, reply),
        _delivery(delivery),
        _tools(r),
        _shown(shown),
        _memories_written(written),
        _notes(r.notes),
        _request(r.trigger, request, request_problem, servers),
    ]
    return layout(f"round {r.id[:8]}", "".join(sections))


def _decision(r: RoundRecord) -> str:
    if r.push is None:
        return '<h2>Decision</h2><p class="empty">The model was not asked, or did not answer.</p>'
    rows = [
        ("push", "yes" if r.push else "no"),
        ("urgency", r.urgency.value if r.urgency else "routine"),
        ("channel asked for", r.decided_channel or "auto"),
        ("channel used", r.channel or "-"),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f"<h2>Decision</h2><dl>{dl}</dl><h3>Message</h3>{_pre(r.body or '', 'body')}"


def _reply(raw: str | None, parts: Reply | None) -> str:
    if raw is None or parts is None:
        return '<h2>Reply</h2><p class="empty">No reply was recorded.</p>'
    return (
        "<h2>Reply</h2><h3>Thinking</h3>"
        f"{_pre(parts.thinking, 'thinking')}<h3>Footer</h3>{_pre(parts.footer, 'footer')}"
        f"<h3>Body</h3>{_pre(parts.body, 'body')}"
        f"<details><summary>The raw reply</summary>{_pre(raw, 'raw')}</details>"
    )


def _delivery(d: Delivery | None) -> str:
    if d is None:
        return '<h2>Delivery</h2><p class="empty">Nothing was handed to a channel.</p>'
    rows = [
        ("channel", d.channel),
        ("status", d.status.value),
        ("attempts", str(d.attempts)),
        ("last error", d.last_error or "-"),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f"<h2>Delivery</h2><dl>{dl}</dl>"


def _tools(r: RoundRecord) -> str:
    offered = (
        '<p id="offered">Offered: '
        + ", ".join(f"<code>{esc(name)}</code>" for name in r.offered)
        + "</p>"
        if r.offered
        else '<p class="empty" id="offered">No tools were offered.</p>'
    )
    if not r.tools:
        return f'<h2>Tool calls</h2>{offered}<p class="empty">No tools were called.</p>'
    items = "".join(
        f"<li><code>{esc(t.name)}</code> {'ok' if t.ok else 'failed'}, {t.ms:.0f} ms</li>"
        for t in r.tools
    )
    return f"<h2>Tool calls</h2>{offered}<ol>{items}</ol>"


@dataclass(frozen=True)
class Shown:
    """A memory or message a round's prompt showed, and its text now (None: gone since)."""

    ref: MemoryRef
    text: str | None


_SHOWN_KINDS = {"thought": "earlier thought", "memory": "memory", "message": "older message"}


def _shown(shown: Sequence[Shown]) -> str:
    if not shown:
        return '<h2>Recalled memories</h2><p class="empty">The prompt showed no memories.</p>'
    items = []
    for item in shown:
        kind = _SHOWN_KINDS[item.ref.kind]
        text = (
            f"<q>{esc(item.text)}</q>"
            if item.text is not None
            else '<span class="empty">(forgotten since)</span>'
        )
        items.append(
            f'<li class="shown-{esc(item.ref.kind)}">{esc(kind)} #{item.ref.id}: {text}</li>'
        )
    return f'<h2>Recalled memories</h2><ul id="recalled">{"".join(items)}</ul>'


def _memories_written(written: Sequence[Memory]) -> str:
    if not written:
        return ""
    items = "".join(f"<li>{esc(m.kind.value)}: {esc(m.text)}</li>" for m in written)
    return f"<h2>Kept from this round</h2><ul>{items}</ul>"


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return "<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"


def _request(
    trigger: str, body: dict[str, Any] | None, problem: str | None, servers: Sequence[str]
) -> str:
    head = (
        "<h2>Request</h2><p>A round does not store its request. This is what "
        f"<code>backthink think --dry-run --trigger {esc(json.dumps(trigger, ensure_ascii=False))}"
        "</code> would send <em>now</em>: the history, journal and recalled memories as they are "
        "today, not as this round saw them.</p>"
    )
    if servers:
        names = ", ".join(f"<code>{esc(name)}</code>" for name in servers)
        head += (
            f"<p>The tools of the MCP servers ({names}) are left out: a page view starts "
            "no server.</p>"
        )
    if body is None:
        return head + f'<p class="empty">{esc(problem or "not available")}</p>'
    lines = [f"model: {body.get('model')}", f"max_tokens: {body.get('max_tokens')}"]
    for tool in body.get("tools", []):
        function = tool.get("function", {})
        lines.append(f"tool: {function.get('name')}: {function.get('description')}")
    for i, m in enumerate(body.get("messages", []), start=1):
        lines.append(f"--- {i} {m.get('role')} ---")
        content = m.get("content")
        if isinstance(content, str):
            lines.append(content)
            continue
        for part in content or []:
            if part.get("type") == "text":
                lines.append(str(part.get("text")))
            else:
                lines.append(f"[image: {part.get('image_url', {}).get('url')}]")
    return (
        head
        + f"<details><summary>The request</summary>{_pre(chr(10).join(lines), 'request')}</details>"
    )
