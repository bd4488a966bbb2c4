"""Everyday chat histories, in Chinese or English, with stock phrases and facts said once.

`history(language, seed)` builds about 3,200 messages over 60 days: the
owner's everyday lines (meals, work, the commute, the weather, shows, sleep)
carry the owner's stock phrases (「就这些啦」, 「哈哈」, "anyway", "lol", ...)
as people's lines do, and the companion answers with its own. Each of 15
facts is said once, by the owner, 2 to 60 days before the end. `windows`
then gives, per fact, 20 new messages whose newest few come back to it in
other words, and as many quiet windows that mention no fact at all.

Every text here is made up for these tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

Language = Literal["zh", "en"]
END = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAYS = 60
PER_DAY = 53
WINDOW = 20


@dataclass(frozen=True)
class Fact:
    """A fact the owner says once, and a later line about it in other words."""

    text: str
    mention: str


FACTS: dict[Language, tuple[Fact, ...]] = {
    "zh": (
        Fact("下周三下午要去医院做胃镜，有点怕", "做胃镜前一天晚上还能吃东西吗"),
        Fact("表妹欧阳雪考上了浙江大学的研究生", "欧阳雪研究生开学了没"),
        Fact("我们部门下个月要搬到望京的新办公室", "望京那边的新办公室离地铁远不远"),
        Fact("家里的猫咪叫芝麻糊，今年三岁了", "芝麻糊最近掉毛好厉害"),
        Fact("国庆打算带爸妈去西双版纳玩一周", "西双版纳那边十月份热不热"),
        Fact("我报了一个周末的吉他班，老师姓诸葛", "诸葛老师说我吉他和弦按得不对"),
        Fact("房东说明年房租要涨五百块", "房租涨了之后要不要考虑搬家"),
        Fact("奶奶的八十大寿定在腊月初八", "奶奶大寿那天我得请假回老家"),
        Fact("上个月在鼓浪屿丢了一把蓝色的雨伞", "鼓浪屿那把雨伞后来也没找到"),
        Fact("我在准备下个月的雅思考试，目标七分", "雅思口语还是好紧张"),
        Fact("同事慕容婷下周要去冰岛看极光", "慕容婷在冰岛拍的极光照片太美了"),
        Fact("体检报告说我有点轻度脂肪肝", "脂肪肝是不是要少喝酒多运动"),
        Fact("我弟弟在哈尔滨工业大学读机械工程", "弟弟说哈尔滨已经零下二十度了"),
        Fact("阳台上种的小番茄终于结果了", "小番茄红了好几个，可以摘了"),
        Fact("明年春天想去三亚考潜水证", "潜水证要学几天才能考"),
    ),
    "en": (
        Fact(
            "I have a dentist appointment for a root canal next Thursday",
            "kind of dreading the root canal this week",
        ),
        Fact(
            "my cousin Bartholomew is moving to Reykjavik in March",
            "did Bartholomew find a flat in Reykjavik yet",
        ),
        Fact(
            "our team is moving to the new office in Shoreditch next month",
            "the Shoreditch office has terrible coffee apparently",
        ),
        Fact("we adopted a greyhound called Biscuit last spring", "Biscuit chewed my headphones"),
        Fact(
            "planning a canoe trip on the Okavango delta in August",
            "do I need malaria pills for the Okavango canoe trip",
        ),
        Fact(
            "I signed up for saxophone lessons on Saturday mornings",
            "my saxophone teacher says my breathing is all wrong",
        ),
        Fact(
            "the landlord wants to raise the rent by two hundred pounds",
            "still annoyed about the rent increase, might move out",
        ),
        Fact(
            "grandma turns ninety in June and we're throwing a party",
            "what do you even get someone for their ninetieth birthday",
        ),
        Fact(
            "lost my blue umbrella on the ferry to Brighton",
            "never got that umbrella back from the ferry people",
        ),
        Fact(
            "studying for the driving theory test, it's on the 14th",
            "the theory test questions about stopping distances are brutal",
        ),
        Fact(
            "my colleague Winifred is retiring at the end of June",
            "we're collecting money for Winifred's retirement gift",
        ),
        Fact(
            "the doctor said my cholesterol is a bit high",
            "switched to oat milk because of the cholesterol thing",
        ),
        Fact(
            "my brother started a mechanical engineering degree in Glasgow",
            "my brother says Glasgow is already freezing",
        ),
        Fact(
            "the tomato plants on the balcony finally have fruit",
            "picked the first ripe tomatoes from the balcony today",
        ),
        Fact(
            "I want to get a scuba diving certificate next spring",
            "how many days does a scuba certificate take",
        ),
    ),
}

# Stock phrases: said by the owner on many lines, about nothing in particular.
STOCK: dict[Language, tuple[tuple[str, float], ...]] = {
    "zh": (("哈哈", 0.22), ("就这些啦", 0.08), ("哈哈哈哈", 0.08), ("好吧", 0.06), ("笑死", 0.05)),
    "en": (("lol", 0.18), ("anyway", 0.08), ("haha", 0.1), ("honestly", 0.05), ("ngl", 0.04)),
}

_ZH_WHEN = ("今天", "早上", "中午", "下午", "晚上", "刚才", "昨天", "这周")
_ZH_DID = (
    "吃了{food}",
    "点了{food}外卖",
    "地铁上人超多",
    "加班到八点",
    "开了一下午的会",
    "看了两集{show}",
    "睡了个午觉",
    "去超市买了{food}",
    "跑了三公里",
    "下雨了没带伞",
    "天气好冷",
    "堵车堵了半小时",
    "收拾了一下房间",
    "洗了一堆衣服",
    "和朋友打了会游戏",
)
_ZH_FOOD = ("拉面", "饺子", "火锅", "沙拉", "炒饭", "包子", "麻辣烫", "寿司", "披萨", "粥")
_ZH_SHOW = ("纪录片", "综艺", "美剧", "动漫", "老电影")
_ZH_FEEL = ("有点累", "还挺开心", "好困啊", "一般般", "挺满足的", "心情不错", "有点烦")
_ZH_REPLY = (
    "听起来不错呀",
    "辛苦啦，早点休息",
    "那挺好的",
    "记得多喝水",
    "要照顾好自己哦",
    "真羡慕你",
    "明天会更好的",
    "我在这儿陪你",
    "好好放松一下吧",
)

_EN_WHEN = ("today", "this morning", "at lunch", "this afternoon", "tonight", "just now")
_EN_DID = (
    "had {food} for lunch",
    "ordered {food} again",
    "the train was packed",
    "stayed late at work",
    "sat through a long meeting",
    "watched two episodes of {show}",
    "took a nap",
    "bought {food} at the shop",
    "went for a run",
    "it rained and I forgot my coat",
    "it's freezing out",
    "traffic was awful",
    "cleaned the flat",
    "did a load of laundry",
    "played games with friends",
)
_EN_FOOD = ("ramen", "dumplings", "pizza", "a salad", "fried rice", "sushi", "a burrito", "soup")
_EN_SHOW = ("that documentary", "the baking show", "a crime drama", "an old sitcom")
_EN_FEEL = ("kind of tired", "pretty happy", "so sleepy", "meh", "not bad", "a bit grumpy")
_EN_REPLY = (
    "that sounds nice",
    "get some rest tonight",
    "glad to hear it",
    "remember to drink water",
    "take care of yourself",
    "I'm here if you want to talk",
    "tomorrow will be better",
    "enjoy the quiet evening",
)


def _owner_line(language: Language, rng: random.Random) -> str:
    if language == "zh":
        did = rng.choice(_ZH_DID).format(food=rng.choice(_ZH_FOOD), show=rng.choice(_ZH_SHOW))
        line = f"{rng.choice(_ZH_WHEN)}{did}，{rng.choice(_ZH_FEEL)}"
    else:
        did = rng.choice(_EN_DID).format(food=rng.choice(_EN_FOOD), show=rng.choice(_EN_SHOW))
        line = f"{rng.choice(_EN_WHEN)} {did}, {rng.choice(_EN_FEEL)}"
    return _with_stock(language, line, rng)


def _with_stock(language: Language, line: str, rng: random.Random) -> str:
    """A line with the stock phrases the owner happens to add to it, before or after."""
    for phrase, share in STOCK[language]:
        if rng.random() < share:
            if rng.random() < 0.3:
                line = f"{phrase} {line}" if language == "en" else f"{phrase}{line}"
            else:
                line = f"{line} {phrase}" if language == "en" else f"{line}{phrase}"
    return line


def _reply(language: Language, rng: random.Random) -> str:
    return rng.choice(_ZH_REPLY if language == "zh" else _EN_REPLY)


Line = tuple[str, str, datetime]
"""(role, text, created_at) of one message."""


def filler(language: Language, rng: random.Random, count: int, start: datetime) -> list[Line]:
    """`count` everyday messages a minute or so apart, the owner and the companion in turn."""
    lines: list[Line] = []
    at = start
    for i in range(count):
        owner = i % 2 == 0 or rng.random() < 0.2
        text = _owner_line(language, rng) if owner else _reply(language, rng)
        lines.append(("user" if owner else "assistant", text, at))
        at += timedelta(minutes=rng.randint(1, 3))
    return lines


@dataclass(frozen=True)
class History:
    """A generated history: its messages oldest first, and where each fact was said."""

    language: Language
    lines: list[Line]
    facts: tuple[Fact, ...]
    said_at: list[int]
    """Per fact, the index of its line in `lines`."""


def history(language: Language, seed: int) -> History:
    """About 3,200 messages over 60 days before `END`, each fact said once 2-60 days before it."""
    rng = random.Random(f"{language}-{seed}")
    lines: list[Line] = []
    for day in range(DAYS, 0, -1):
        morning = END - timedelta(days=day) + timedelta(hours=rng.randint(-4, 0))
        lines += filler(language, rng, PER_DAY, morning)
    facts = FACTS[language]
    said_at: list[int] = []
    for fact in facts:
        before = END - timedelta(days=rng.uniform(2, DAYS))
        index = max(i for i, line in enumerate(lines) if line[2] <= before)
        while index in said_at or lines[index][0] != "user":
            index -= 1
        said_at.append(index)
        lines[index] = ("user", fact.text, lines[index][2])
    return History(language, lines, facts, said_at)


@dataclass(frozen=True)
class Window:
    """20 new messages after the history; `fact` is the index of the fact they mention, if any."""

    lines: list[Line]
    fact: int | None


def windows(h: History, seed: int) -> list[Window]:
    """Per fact, a window whose mention is among its newest three; and as many quiet ones.

    Windows follow each other in time after the history, a quiet one after
    each mention, in a shuffled order of the facts.
    """
    rng = random.Random(f"{h.language}-{seed}-windows")
    order = list(range(len(h.facts)))
    rng.shuffle(order)
    out: list[Window] = []
    at = END + timedelta(hours=1)
    for fact in order:
        for mentioned in (fact, None):
            lines = filler(h.language, rng, WINDOW, at)
            if mentioned is not None:
                back = rng.randint(0, 2)
                place = WINDOW - 1 - back
                text = _with_stock(h.language, h.facts[mentioned].mention, rng)
                lines[place] = ("user", text, lines[place][2])
            out.append(Window(lines, mentioned))
            at = lines[-1][2] + timedelta(hours=2)
    return out
