"""The command line beside the API: owners' tokens, and the session as `messages list` prints it."""

from __future__ import annotations

import json
import sqlite3

from conftest import Workdir


def test_a_token_is_printed_once_and_only_its_digest_is_kept(workdir: Workdir) -> None:
    """`owners token` prints a new token each time; the database never holds the token itself."""
    first = workdir.cli("owners", "token", "o").stdout.strip()
    second = workdir.cli("owners", "token", "o").stdout.strip()
    assert first.startswith("bt_") and second.startswith("bt_") and first != second
    with sqlite3.connect(workdir.path / "bt.db") as db:
        rows = db.execute("SELECT digest, owner_id FROM api_token").fetchall()
    assert len(rows) == 2 and {owner for _, owner in rows} == {"o"}
    assert (workdir.path / "bt.db").read_bytes().find(first.encode()) == -1
    unknown = workdir.cli("owners", "token", "nobody", check=False)
    assert unknown.returncode == 2 and "unknown owner 'nobody'" in unknown.stderr
    revoked = workdir.cli("owners", "token", "o", "--revoke").stdout
    assert revoked.strip() == "revoked 2 token(s) of owner o"


def test_messages_list_prints_the_session_as_the_api_does(workdir: Workdir) -> None:
    """The newest N, oldest first; --json holds the API's message objects."""
    for i, at in enumerate(("2026-11-29T08:00:00+08:00", "2026-11-29T09:00:00+08:00")):
        workdir.cli("messages", "add", "--role", "user", "--text", f"第{i}句\n换行", "--at", at)
    workdir.cli("messages", "add", "--role", "assistant", "--text", "嗯", "--speaker", "cyrene",
                "--channel", "phone", "--at", "2026-11-29T10:00:00+08:00")  # fmt: skip
    lines = workdir.cli("messages", "list", "--limit", "2").stdout.splitlines()
    assert lines == [
        "     2  2026-11-29 09:00  user  [session]  第1句 换行",
        "     3  2026-11-29 10:00  assistant:cyrene  [phone]  嗯",
    ]
    data = json.loads(workdir.cli("messages", "list", "--json").stdout)
    assert [m["text"] for m in data["messages"]] == ["第0句\n换行", "第1句\n换行", "嗯"]
    assert data["messages"][0] == {
        "id": 1,
        "client_id": None,
        "role": "user",
        "text": "第0句\n换行",
        "image": None,
        "at": "2026-11-29T00:00:00+00:00",
        "channel": None,
        "speaker": None,
        "origin": "chat",
        "delivery": None,
    }


def test_messages_list_shows_control_characters_written_out(workdir: Workdir) -> None:
    """An escape sequence or a bidi override in a message is printed as text, never sent raw."""
    text = "\x1b]0;owned\x07red\x1b[31m \u202eevil"
    workdir.cli(
        "messages", "add", "--role", "assistant", "--text", text,
        "--speaker", "x\x1b[2J", "--channel", "ph\x9bone", "--at", "2026-11-29T10:00:00+08:00",
    )  # fmt: skip
    out = workdir.cli("messages", "list").stdout
    assert not any(ch in out for ch in "\x1b\x07\x9b\u202e")
    assert out.rstrip("\n").endswith(
        "assistant:x\\x1b[2J  [ph\\x9bone]  \\x1b]0;owned\\x07red\\x1b[31m \\u202eevil"
    )
    data = json.loads(workdir.cli("messages", "list", "--json").stdout)
    assert data["messages"][0]["text"] == text
