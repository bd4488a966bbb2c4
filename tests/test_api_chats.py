"""One conversation per front-end chat, pure: edits, regenerates, two chats, pushes in place.

Explicit sessions and requests, as `plan` sees them (superseded messages are
never in what it reads); no server, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from backthink.api.placing import with_pushes
from backthink.api.turns import RELAY_CHAT, Ids, Turn, plan
from backthink.models import Message, SessionEntry

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
A, B = f"{RELAY_CHAT}a", f"{RELAY_CHAT}b"


def say(
    n: int, role: str, text: str, chat: str | None = A, client: str | None = None
) -> SessionEntry:
    """A stored chat message of `chat`."""
    message = Message(
        id=n,
        owner_id="o",
        role=role,
        text=text,
        chat_id=chat,
        client_id=client,
        created_at=T0 + timedelta(minutes=n),
    )
    return SessionEntry(message)


def push(n: int, text: str) -> SessionEntry:
    """A delivered push."""
    message = Message(
        id=n,
        owner_id="o",
        role="assistant",
        text=text,
        origin="proactive",
        channel="phone",
        created_at=T0 + timedelta(minutes=n),
    )
    return SessionEntry(message, "delivered")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


EVENING = [
    say(1, "user", "a1"),
    say(2, "assistant", "r1"),
    say(3, "user", "a2"),
    say(4, "assistant", "r2"),
    say(5, "user", "a3"),
    say(6, "assistant", "r3"),
]


def shown(turn: Turn, request: list[dict[str, Any]]) -> list[str]:
    """The forwarded messages' texts, pushes in their places."""
    return [m["content"] for m in with_pushes(request, turn.placed)]


@pytest.mark.parametrize(
    ("request_", "new", "superseded", "replaces"),
    [
        # The next turn: nothing left behind.
        ([user("a1"), bot("r1"), user("a2"), bot("r2"), user("a3"), bot("r3"), user("a4")],
         ["a4"], [], None),
        # The last reply regenerated: the question is held, its reply replaced.
        ([user("a1"), bot("r1"), user("a2"), bot("r2"), user("a3")], [], [], 6),
        # A reply in the middle regenerated (a branch): what came after it is left behind.
        ([user("a1"), bot("r1"), user("a2")], [], [5, 6], 4),
        # The second message edited: every turn after the first reply is left behind.
        ([user("a1"), bot("r1"), user("a2 edited")], ["a2 edited"], [3, 4, 5, 6], None),
        # The last message edited.
        ([user("a1"), bot("r1"), user("a2"), bot("r2"), user("a3!")], ["a3!"], [5, 6], None),
    ],
)  # fmt: skip
def test_edits_and_regenerates_keep_one_conversation(
    request_: list[dict[str, Any]], new: list[str], superseded: list[int], replaces: int | None
) -> None:
    """By content: a regenerate replaces the reply; an edit or branch leaves the rest behind."""
    turn = plan(request_, EVENING)
    assert [s.text for s in turn.new] == new
    assert turn.superseded == superseded
    assert (turn.replaces.message.id if turn.replaces else None) == replaces
    assert turn.chat_id == A and not turn.new_chat


def test_two_chats_side_by_side_never_supersede_each_other() -> None:
    """Each chat is matched with its own messages only, by its id or by the one the relay gave."""
    session = [
        say(1, "user", "a1", "owui-a"),
        say(2, "assistant", "r1", "owui-a"),
        say(3, "user", "b1", "owui-b"),
        say(4, "assistant", "q1", "owui-b"),
        say(5, "user", "a2", "owui-a"),
        say(6, "assistant", "r2", "owui-a"),
    ]
    turn = plan([user("b1"), bot("q1"), user("b2")], session, Ids(chat="owui-b"))
    assert ([s.text for s in turn.new], turn.superseded, turn.chat_id) == (["b2"], [], "owui-b")
    # Chats that name no id, the same way: going back to chat b leaves chat a's turns alone.
    unnamed = [
        say(1, "user", "a1", A),
        say(2, "assistant", "r1", A),
        say(3, "user", "b1", B),
        say(4, "assistant", "q1", B),
        say(5, "user", "a2", A),
        say(6, "assistant", "r2", A),
    ]
    back_to_b = plan([user("b1"), bot("q1"), user("b2")], unnamed)
    assert (back_to_b.superseded, back_to_b.chat_id) == ([], B)
    back_to_a = plan([user("a1"), bot("r1"), user("a2 again")], unnamed)
    assert (back_to_a.superseded, back_to_a.chat_id) == ([5, 6], A)
    # The same words as chat a's, in a chat of another id: nothing of chat a is touched.
    other = plan([user("a1"), bot("r1"), user("x")], session, Ids(chat="owui-c"))
    assert (other.superseded, other.chat_id, [s.text for s in other.new]) == ([], "owui-c", ["x"])


def test_a_chat_without_an_id_gets_one_from_the_relay() -> None:
    """A first turn begins a chat the relay names; the next turn finds it; a retry keeps it."""
    first = plan([user("hello")], EVENING)
    assert first.new_chat and first.chat_id is None
    retry = plan([user("hello")], [*EVENING, say(7, "user", "hello", B)])
    assert (retry.new, retry.chat_id, retry.new_chat) == ([], B, False)
    named = plan([user("hello")], EVENING, Ids(chat="owui"))
    assert (named.chat_id, named.new_chat) == ("owui", False)


@pytest.mark.parametrize(
    ("ids", "new", "superseded", "replaces"),
    [
        # The message id the session holds: that turn regenerated, whatever the text says.
        (Ids(chat=A, message="m3", parent="p2"), [], [], 6),
        # A new message id with the same words: an edit, not a regenerate.
        (Ids(chat=A, message="m3b", parent="p2"), ["a3"], [5, 6], None),
    ],
)
def test_message_ids_tell_a_regenerate_from_an_edit(
    ids: Ids, new: list[str], superseded: list[int], replaces: int | None
) -> None:
    """With the front-end's message ids, same words or not, the id decides."""
    session = [*EVENING[:4], say(5, "user", "a3", client="m3"), EVENING[5]]
    turn = plan([user("a1"), bot("r1"), user("a2"), bot("r2"), user("a3")], session, ids)
    assert [s.text for s in turn.new] == new
    assert turn.superseded == superseded
    assert (turn.replaces.message.id if turn.replaces else None) == replaces
    assert turn.client_id == ids.message


def test_a_first_turn_regenerated_or_edited_by_id() -> None:
    """A chat's first message: its id held is a regenerate; a new id with no parent an edit."""
    session = [say(1, "user", "hi", "c", "m1"), say(2, "assistant", "hey", "c")]
    again = plan([user("hi")], session, Ids(chat="c", message="m1", parent=""))
    assert (again.new, again.replaces, again.superseded) == ([], session[1], [])
    edited = plan([user("hello")], session, Ids(chat="c", message="m9", parent=""))
    assert ([s.text for s in edited.new], edited.superseded) == (["hello"], [1, 2])
    # Without a parent header nothing says it is that chat's start: nothing is left behind.
    plain = plan([user("hello")], session, Ids(chat="c", message="m9"))
    assert plain.superseded == []


def test_pushes_stay_at_their_place_on_every_later_turn() -> None:
    """A push between two turns is shown between them on each later request, never twice."""
    session = [*EVENING[:4], push(10, "dinner?"), *EVENING[4:]]
    request_ = [user("a1"), bot("r1"), user("a2"), bot("r2"), user("a3"), bot("r3"), user("a4")]
    assert shown(plan(request_, session), request_) == [
        "a1", "r1", "a2", "r2", "dinner?", "a3", "r3", "a4",
    ]  # fmt: skip
    showing = [*request_[:4], bot("dinner?"), *request_[4:]]
    assert plan(showing, session).pushes == []


def test_a_chat_begun_after_a_push_shows_it_before_its_first_message() -> None:
    """The pushes since the owner's last turn go before a new chat's first message, every turn."""
    session = [*EVENING, push(10, "dinner?")]
    first = plan([user("b1")], session)
    assert shown(first, [user("b1")]) == ["dinner?", "b1"]
    later = [*session, say(11, "user", "b1", B), say(12, "assistant", "q1", B)]
    request_ = [user("b1"), bot("q1"), user("b2")]
    assert shown(plan(request_, later), request_) == ["dinner?", "b1", "q1", "b2"]
    # An older push, before the owner's last turn of another chat, is not this chat's.
    older = [*EVENING[:2], push(3, "old"), *EVENING[2:], *later[6:]]
    assert shown(plan(request_, older), request_) == ["dinner?", "b1", "q1", "b2"]
