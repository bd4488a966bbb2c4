"""The owner's evening in Open WebUI, played once against the stack and kept for the assertions.

Chat A: four turns, the fourth regenerated, the second edited (turns 3 and 4
left behind on the old branch), one more turn on the new branch; then a round
of backthink (nothing to say). Then the owner is away: a round pushes into the
Open WebUI Channel. Chat B, a new chat: two turns, the owner's autocomplete on
for the second one.

Each step keeps the slice of what the tap saw (Open WebUI → relay) and what
the fake saw (relay and rounds → upstream) while it ran; every step waits
until nothing is under way, so a slice holds that step's requests and no other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support.fake_openai import RecordedRequest

from .openwebui import Chat, Turn
from .replies import ROUND_MODEL, task_of
from .stack import PUSH_CHANNEL, Stack
from .tap import Tapped

A1, A2, A3, A4 = "今天考完试了", "还不错，就是好累", "嗯，明天还有组会", "组会的材料还没做完"
R1, R2, R3 = "辛苦啦！考得怎么样？", "那今晚早点睡吧。", "组会加油！要我帮你理一理吗？"
R4, R4_AGAIN = "先列个提纲吧，一步一步来。", "别急，先把最重要的一页做完。"
A2_EDITED, R2_EDITED = "其实考得不太好", "没关系，一次考试说明不了什么。"
A5, R5 = "谢谢你安慰我", "一直都在哦。"
PUSH = "晚上记得吃点热乎的，别光顾着准备组会。"
B1, RB1 = "我回来了", "欢迎回来！刚才有没有吃饭？"
B2, RB2 = "晚饭吃了火锅", "火锅好呀，暖和。"
TYPED = ("晚饭", "晚饭吃了")
"""What the message box holds when autocomplete asks, before B2 is sent."""
SUPERSEDED = (A3, R3, A4, R4, R4_AGAIN)
"""What the edit of turn 2 left on the old branch."""


@dataclass
class Step:
    """One thing the owner did, with the requests it caused."""

    name: str
    tapped: list[Tapped] = field(default_factory=list)
    """What Open WebUI sent the relay."""
    upstream: list[RecordedRequest] = field(default_factory=list)
    """What reached the fake upstream (relayed calls and backthink's rounds)."""
    turn: Turn | None = None
    round: dict[str, Any] | None = None
    session: list[dict[str, Any]] = field(default_factory=list)
    """backthink's session right after the step, as a round reads it (no superseded messages)."""

    def chat_turns(self) -> list[RecordedRequest]:
        """The chat turns among the upstream requests (no task, no round)."""
        return [
            r
            for r in self.upstream
            if r.path == "/v1/chat/completions"
            and r.body.get("model") != ROUND_MODEL
            and task_of(r.body) is None
        ]

    def tasks(self) -> list[RecordedRequest]:
        """The Open WebUI tasks among the upstream requests."""
        return [r for r in self.upstream if task_of(r.body) is not None]

    def rounds(self) -> list[RecordedRequest]:
        """backthink's own round requests among the upstream requests."""
        return [r for r in self.upstream if r.body and r.body.get("model") == ROUND_MODEL]


@dataclass
class Story:
    """The steps, in order, and what the owner saw at the end."""

    steps: dict[str, Step] = field(default_factory=dict)
    chats: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Open WebUI's stored chats at the end, by name ("a", "b")."""
    channel: list[Any] = field(default_factory=list)
    """The Open WebUI Channel's messages at the end, newest first."""
    session: list[dict[str, Any]] = field(default_factory=list)
    """backthink's session at the end, superseded messages included."""
    session_current: list[dict[str, Any]] = field(default_factory=list)
    """backthink's session at the end as a round reads it (no superseded messages)."""
    status: dict[str, Any] = field(default_factory=dict)
    """backthink's `GET /v1/status` at the end."""
    relayed: list[dict[str, Any]] = field(default_factory=list)
    """backthink's `relay.finished` log lines."""


class Player:
    """Plays the story on a stack, one step at a time."""

    def __init__(self, stack: Stack) -> None:
        """Play on `stack`; the fake's replies are scripted as the story goes."""
        self.stack = stack
        self.story = Story()

    def step(self, name: str) -> Step:
        """Open a step: what is tapped and relayed from here on belongs to it."""
        step = Step(name)
        self.story.steps[name] = step
        step.tapped = list(self.stack.tap.records)  # marks where the step begins
        step.upstream = list(self.stack.fake.requests)
        return step

    def close(self, step: Step, action: Callable[[], object] | None = None) -> None:
        """Run `action` (if any), close the step once nothing is under way, keep its requests."""
        if action is not None:
            action()
        self.stack.wait(f"{step.name} settles", self.stack.settled)
        before_tap, before_fake = len(step.tapped), len(step.upstream)
        step.tapped = self.stack.tap.records[before_tap:]
        step.upstream = self.stack.fake.requests[before_fake:]

    def say(
        self,
        name: str,
        chat: Chat | None,
        text: str,
        *replies: str,
        parent: Turn | None,
        regenerate: Turn | None = None,
    ) -> tuple[Chat, Turn]:
        """The owner sends `text` (or regenerates); wait for the reply and its background tasks."""
        self.stack.replies.chat(text, *replies)
        step = self.step(name)
        browser = self.stack.browser
        turn = browser.send(self.stack.model, text, chat=chat, parent=parent, regenerate=regenerate)
        first = turn.parent_id is None
        wanted = {"follow_up_generation"} | (
            {"title_generation", "tags_generation"} if first else set()
        )

        def seen() -> bool:
            asked = {task_of(r.body) for r in self.stack.tap.records[len(step.tapped) :]}
            return wanted <= asked and self.stack.settled()

        browser.wait_turn(turn, first=first, seen=seen)
        self.close(step)
        step.turn = turn
        step.session = self.stack.session(everything=False)
        chat = chat or Chat(turn.chat_id)
        chat.turns.append(turn)
        return chat, turn

    def poke(self, name: str, reply: str | None = None) -> dict[str, Any]:
        """A round of backthink now (`reply`: what the model says in it); its summary."""
        step = self.step(name)
        if reply is not None:
            self.stack.replies.next_round(reply)
        step.round = self.stack.poke(name)
        self.close(step)
        return step.round

    def play(self) -> Story:
        """Play every step; then read what Open WebUI and backthink hold."""
        stack, browser = self.stack, self.stack.browser
        self.close(self.step("page-load"), stack.load_page)
        a, t1 = self.say("a-turn-1", None, A1, R1, parent=None)
        a, t2 = self.say("a-turn-2", a, A2, R2, parent=t1)
        a, t3 = self.say("a-turn-3", a, A3, R3, parent=t2)
        a, t4 = self.say("a-turn-4", a, A4, R4, R4_AGAIN, parent=t3)
        self.say("a-regenerate-4", a, A4, parent=t3, regenerate=t4)
        a, t2b = self.say("a-edit-2", a, A2_EDITED, R2_EDITED, parent=t1)
        self.say("a-turn-5", a, A5, R5, parent=t2b)
        self.poke("round-after-edit")

        push = f"[decision:push]\n[channel:{PUSH_CHANNEL}]\n[urgency:routine]\n{PUSH}"
        self.poke("round-push", push)
        stack.wait(
            "the push reaches the Open WebUI Channel",
            lambda: any(
                m.get("content") == PUSH for m in browser.channel_messages(stack.channel_id)
            ),
        )

        b, u1 = self.say("b-turn-1", None, B1, RB1, parent=None)
        browser.enable_autocomplete()
        step = self.step("b-typing")
        for typed in TYPED:
            browser.autocomplete(stack.model, typed, b)
        self.close(step)
        self.say("b-turn-2", b, B2, RB2, parent=u1)

        story = self.story
        story.chats = {"a": browser.chat(a.id), "b": browser.chat(b.id)}
        story.channel = browser.channel_messages(stack.channel_id)
        story.session = stack.session()
        story.session_current = stack.session(everything=False)
        story.status = stack.api("/v1/status")
        story.relayed = [e for e in stack.daemon.seen if e.get("event") == "relay.finished"]
        return story
