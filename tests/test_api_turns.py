"""The relay's bookkeeping, pure: what a chat request adds to the session, which pushes it shows.

Tables of explicit sessions and requests; no server, no clock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from backthink.api.placing import MAX_PUSHES
from backthink.api.placing import with_pushes as place
from backthink.api.said import content_text
from backthink.api.turns import plan
from backthink.api.upstream import StreamReader, passed_headers, read_completion
from backthink.models import DeliveryState, Message, SessionEntry

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def entry(n: int, role: str, text: str, *, push: DeliveryState | None = None) -> SessionEntry:
    message = Message(
        id=n,
        owner_id="o",
        role=role,
        text=text,
        origin="proactive" if push else "chat",
        created_at=T0 + timedelta(minutes=n),
    )
    return SessionEntry(message, push)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "You are Cyrene."}


@pytest.mark.parametrize(
    ("session", "request_", "new", "pushes"),
    [
        # A first turn on an empty session: the user message is new.
        ([], [SYSTEM, user("hi")], ["hi"], []),
        # A new turn after a reply the session holds: only the newest message is new.
        (
            [entry(1, "user", "hi"), entry(2, "assistant", "hello")],
            [SYSTEM, user("hi"), bot("hello"), user("how are you")],
            ["how are you"],
            [],
        ),
        # A push delivered since the previous turn is shown before the new message.
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(3, "assistant", "exam?", push="delivered"),
            ],
            [user("hi"), bot("hello"), user("went well")],
            ["went well"],
            ["exam?"],
        ),
        # A push whose delivery failed or is pending is not shown.
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(3, "assistant", "lost", push="undelivered"),
                entry(4, "assistant", "waiting", push="pending"),
            ],
            [user("hi"), bot("hello"), user("back")],
            ["back"],
            [],
        ),
        # A retry after a failed call: the session holds the user message, no reply.
        (
            [entry(1, "user", "hi"), entry(2, "assistant", "hello"), entry(3, "user", "again")],
            [user("hi"), bot("hello"), user("again")],
            [],
            [],
        ),
        # A regenerated reply: the user message and its old reply are there; nothing is new.
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(3, "assistant", "exam?", push="delivered"),
                entry(4, "user", "fine"),
                entry(5, "assistant", "good"),
            ],
            [user("hi"), bot("hello"), user("fine")],
            [],
            ["exam?"],
        ),
        # An edited last turn: the edited text is new (the old turn is superseded).
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(3, "user", "fien"),
                entry(4, "assistant", "what?"),
            ],
            [user("hi"), bot("hello"), user("fine")],
            ["fine"],
            [],
        ),
        # A retry after a regenerated reply the front-end no longer holds.
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(3, "assistant", "hello again"),
                entry(4, "user", "there?"),
            ],
            [user("hi"), bot("hello"), user("there?")],
            [],
            [],
        ),
        # An edited turn, retried after its call failed (the session reads no superseded turn).
        (
            [
                entry(1, "user", "hi"),
                entry(2, "assistant", "hello"),
                entry(5, "user", "fine"),
            ],
            [user("hi"), bot("hello"), user("fine")],
            [],
            [],
        ),
        # Two user messages in a row, one of them held already.
        (
            [entry(1, "user", "hi"), entry(2, "assistant", "hello"), entry(3, "user", "one")],
            [user("hi"), bot("hello"), user("one"), user("two")],
            ["two"],
            [],
        ),
        # The same short text said again later is a new message, not a held one.
        (
            [
                entry(1, "user", "ok"),
                entry(2, "assistant", "a"),
                entry(3, "user", "b"),
                entry(4, "assistant", "c"),
            ],
            [user("ok"), bot("a"), user("b"), bot("c"), user("ok")],
            ["ok"],
            [],
        ),
        # A history the session never saw: its last turn stands in; pushes after it are shown.
        (
            [
                entry(1, "user", "old"),
                entry(2, "assistant", "older"),
                entry(3, "assistant", "ping", push="delivered"),
            ],
            [user("elsewhere"), bot("said"), user("new here")],
            ["new here"],
            ["ping"],
        ),
    ],
)
def test_plan(
    session: list[SessionEntry], request_: list[dict[str, Any]], new: list[str], pushes: list[str]
) -> None:
    """Each kind of turn stores exactly the messages the session lacks and shows recent pushes."""
    turn = plan(request_, session)
    assert [s.text for s in turn.new] == new
    assert [p.message.text for p in turn.pushes] == pushes


HISTORY = [
    entry(1, "user", "hi"),
    entry(2, "assistant", "hello"),
    entry(3, "assistant", "exam?", push="delivered"),
    entry(4, "user", "fine"),
    entry(5, "assistant", "good"),
]


@pytest.mark.parametrize(
    ("session", "request_", "new", "pushes"),
    [
        # A front-end that shows pushes sends them back: the anchor holds them; none again.
        (
            HISTORY,
            [user("hi"), bot("hello"), bot("exam?"), user("fine"), bot("good"), user("next")],
            ["next"],
            [],
        ),
        # It shows a push that came after its last turn: that push is not put in twice; the
        # earlier one it does not show is put at its place.
        (
            [*HISTORY, entry(6, "assistant", "dinner?", push="delivered")],
            [user("hi"), bot("hello"), user("fine"), bot("good"), bot("dinner?"), user("pasta")],
            ["pasta"],
            ["exam?"],
        ),
        # It shows the pushes, the session also holds one it missed: only that one is shown.
        (
            [*HISTORY, entry(6, "assistant", "dinner?", push="delivered")],
            [user("hi"), bot("hello"), bot("exam?"), user("fine"), bot("good"), user("x")],
            ["x"],
            ["dinner?"],
        ),
        # A new chat (no anchor) sees no push its session showed an earlier turn already.
        (
            [*HISTORY, entry(6, "user", "bye"), entry(7, "assistant", "see you")],
            [SYSTEM, user("new topic")],
            ["new topic"],
            [],
        ),
        # A new chat sees the pushes delivered since the session's last turn.
        (
            [*HISTORY, entry(6, "assistant", "dinner?", push="delivered")],
            [SYSTEM, user("new topic")],
            ["new topic"],
            ["dinner?"],
        ),
        # A new chat that opens with the words of the session's last question: a new question.
        (HISTORY, [SYSTEM, user("fine")], ["fine"], []),
        # The first turn retried after a failed call: held, and shown what its first try was.
        (
            [entry(1, "assistant", "morning!", push="delivered"), entry(2, "user", "hi")],
            [SYSTEM, user("hi")],
            [],
            ["morning!"],
        ),
    ],
)
def test_plan_with_pushes_the_front_end_shows_and_new_chats(
    session: list[SessionEntry], request_: list[dict[str, Any]], new: list[str], pushes: list[str]
) -> None:
    """Pushes in the request match the session; a new chat neither loses nor repeats anything."""
    turn = plan(request_, session)
    assert [s.text for s in turn.new] == new
    assert [p.message.text for p in turn.pushes] == pushes


def test_a_regenerated_reply_replaces_the_one_the_session_holds_for_that_turn() -> None:
    """The same question again after its reply: nothing is new, and that reply is to be replaced."""
    turn = plan([user("hi"), bot("hello"), user("fine")], HISTORY)
    assert turn.new == [] and turn.replaces is HISTORY[4]
    retry = plan([user("hi"), bot("hello"), user("fine")], HISTORY[:4])
    assert retry.new == [] and retry.replaces is None
    fresh = plan([user("hi"), bot("hello"), user("fine"), bot("good"), user("more")], HISTORY)
    assert [s.text for s in fresh.new] == ["more"] and fresh.replaces is None


def test_pushes_go_right_before_the_newest_user_message_and_nothing_else_changes() -> None:
    """The forwarded messages are the client's, byte for byte, with the pushes inserted."""
    session = [
        entry(1, "user", "hi"),
        entry(2, "assistant", "hello"),
        entry(3, "assistant", "p1", push="delivered"),
        entry(4, "assistant", "p2", push="delivered"),
    ]
    request_ = [
        SYSTEM,
        user("hi"),
        bot("hello"),
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
    ]
    turn = plan(request_, session)
    out = place(request_, turn.placed)
    assert out == [SYSTEM, user("hi"), bot("hello"), bot("p1"), bot("p2"), request_[3]]
    assert [m for m in out if m not in (bot("p1"), bot("p2"))] == request_


def test_pushes_go_before_the_run_of_trailing_user_messages() -> None:
    """Two user messages in a row after a push: the push goes before both, never between."""
    session = [
        entry(1, "user", "hi"),
        entry(2, "assistant", "hello"),
        entry(3, "assistant", "p1", push="delivered"),
    ]
    request_ = [SYSTEM, user("hi"), bot("hello"), user("one"), user("two")]
    out = place(request_, plan(request_, session).placed)
    assert out == [SYSTEM, user("hi"), bot("hello"), bot("p1"), user("one"), user("two")]


def test_at_most_the_newest_pushes_are_shown() -> None:
    """A long absence shows only the newest MAX_PUSHES pushes."""
    pushes = [entry(10 + i, "assistant", f"p{i}", push="delivered") for i in range(MAX_PUSHES + 3)]
    turn = plan(
        [user("hi"), bot("hello"), user("back")],
        [entry(1, "user", "hi"), entry(2, "assistant", "hello"), *pushes],
    )
    assert [p.message.text for p in turn.pushes] == [f"p{i}" for i in range(3, MAX_PUSHES + 3)]


def test_content_parts_give_text_and_the_first_image() -> None:
    """A message of parts is read as its texts joined and its first image URL."""
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "at this"},
    ]
    assert content_text(parts) == ("look\nat this", "data:image/png;base64,AAAA")
    assert content_text(None) == ("", None)


def test_stream_reader_keeps_the_text_across_split_chunks() -> None:
    """SSE lines split anywhere still give the whole reply, its end and its usage."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "你好，"}}]},
        {"choices": [{"index": 0, "delta": {"content": "world"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    ]
    raw = b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    reader = StreamReader()
    for i in range(0, len(raw), 5):
        reader.feed(raw[i : i + 5])
    done = reader.finish()
    assert (done.text, done.complete, done.prompt_tokens, done.completion_tokens) == (
        "你好，world",
        True,
        7,
        3,
    )


def test_stream_reader_reads_a_line_split_into_many_pieces_and_skips_deep_nesting() -> None:
    """A long line fed a few bytes at a time is read once whole; JSON nested too deep is passed."""
    line = json.dumps({"choices": [{"index": 0, "delta": {"content": "长" * 20_000}}]})
    raw = f"data: {line}\n\ndata: {'[' * 50_000}\n\n".encode()
    reader = StreamReader()
    for i in range(0, len(raw), 7):
        reader.feed(raw[i : i + 7])
    assert reader.finish().text == "长" * 20_000
    assert not read_completion(b"[" * 50_000).complete


def test_a_stream_cut_short_is_not_complete() -> None:
    """Without a finish reason or [DONE], the reply is not complete (and is not kept)."""
    reader = StreamReader()
    reader.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "half"}}]}\n\n')
    assert not reader.finish().complete


def test_non_streamed_completion_and_headers() -> None:
    """A plain completion gives its text and usage; only the headers that matter pass."""
    body = {
        "choices": [{"message": {"content": "hey"}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
    found = read_completion(json.dumps(body).encode())
    assert (found.text, found.complete, found.prompt_tokens) == ("hey", True, 2)
    assert not read_completion(b"not json").complete
    headers = {
        "Content-Type": "application/json",
        "X-Request-Id": "r1",
        "Set-Cookie": "a=b",
        "x-ratelimit-remaining-requests": "9",
    }
    assert passed_headers(headers) == {
        "content-type": "application/json",
        "x-request-id": "r1",
        "x-ratelimit-remaining-requests": "9",
    }
