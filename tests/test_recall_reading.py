"""Recall's reading of a window: phrases, shared runs, salience, and the two ways to read.

Pure functions only (no store): what a clause is, when a window clause is a
stock phrase, how shared words count, which recalled texts look like facts,
and when a window is an owner's question.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import UTC, datetime

import pytest

from backthink.memory import phrases, reading, salience, terms
from backthink.memory import scoring as recall
from backthink.memory.context import Candidate
from backthink.models import Message

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def say(text: str, role: str = "user") -> Message:
    """A window message."""
    return Message(owner_id="ana", role=role, text=text, created_at=T0)


def test_clauses_are_runs_of_index_tokens_between_punctuation() -> None:
    """A clause ends at punctuation, an emoji or a change of script; an apostrophe joins."""
    assert terms.clauses("it's pouring, wear something warm 😂 ok") == (
        "it s pouring",
        "wear something warm",
        "ok",
    )
    assert terms.clauses("驿站小哥，天天去取件IKEA买书") == (
        "驿站 站小 小哥",
        "天天 天去 去取 取件",
        "ikea",
        "买书",
    )


def test_a_phrase_is_held_where_its_tokens_stand_in_a_row() -> None:
    """A phrase term matches its tokens one after the other, in any case, across spaces."""
    assert terms.holds("caught up on a couple of that", "up on a")
    assert not terms.holds("caught up on", "up a")
    assert terms.holds("我说驿站小哥都认识我了", "驿站 站小 小哥")
    assert not terms.holds("驿站的小哥", "驿站 站小 小哥")
    assert terms.inside(["Wear Something Warm!", "warm"], ["wear something warm"]) == {
        "wear something warm": 1
    }


def test_a_phrase_is_one_fts5_string_without_a_prefix_star() -> None:
    """The words index finds a phrase as its tokens in a row, and nothing else."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE w USING fts5(text, content='', tokenize='unicode61')")
    for i, text in enumerate(["驿站小哥都认识我了", "小哥在驿站", "wear something warm today"]):
        conn.execute("INSERT INTO w(rowid, text) VALUES (?, ?)", (i + 1, terms.index_text(text)))
    for phrase, found in (
        ("驿站 站小 小哥", [1]),
        ("wear something warm", [3]),
        ("something w", []),
    ):
        query = terms.term_query(phrase)
        assert [
            r for (r,) in conn.execute("SELECT rowid FROM w WHERE w MATCH ?", (query,))
        ] == found


def test_a_window_clause_said_twice_before_is_stock() -> None:
    """Its terms come from no window message, unless another clause says them too."""
    df = {"wear": 3, "someth": 3, "warm": 3, "jacket": 2}
    asked = phrases.window_phrases(["wear something warm, new jacket"], df, cap=30)
    assert asked == ["wear something warm"]  # 'new jacket' is two tokens: a word or two
    stock = phrases.stock({"wear something warm": phrases.STOCK_SAID})
    assert phrases.fresh_terms("wear something warm, new jacket", stock) == {"new", "jacket"}
    assert "warm" in phrases.fresh_terms("wear something warm, warm jacket", stock)
    assert phrases.stock({"wear something warm": phrases.STOCK_SAID - 1}) == frozenset()


def test_a_clause_of_common_words_only_is_never_counted() -> None:
    """Counting a phrase none of whose terms is usable costs the index a walk of every row."""
    df = {"wear": 5000, "someth": 5000, "warm": 5000}
    assert phrases.window_phrases(["wear something warm"], df, cap=1000) == []


def test_shared_runs_are_the_longest_runs_in_the_same_order() -> None:
    """Tokens the other text holds one after the other make one run; a gap starts another."""
    said = terms.stems("took the kayak out, the orange one")
    other = terms.stems("a bright orange kayak, the kayak out there")
    assert phrases.shared_runs(said, other) == [
        ("the", "kayak", "out"),
        ("the",),
        ("orang",),
    ]


def test_a_cjk_run_counts_once_and_a_latin_run_a_half_more() -> None:
    """Overlapping 2-grams of one run tell no more than the rarest; two rare words do."""
    rarity = {"读书": 3.0, "书会": 2.0, "weld": 3.0, "class": 2.0}
    assert phrases.runs_weight([("读书", "书会")], ["读书", "书会"], rarity) == 3.0
    assert phrases.runs_weight([("weld", "class")], ["weld", "class"], rarity) == (
        3.0 + phrases.RUN_WORDS * 2.0
    )
    # A stem found only as a prefix (weld in welder) is in no run: it counts alone.
    assert phrases.runs_weight([], ["weld"], rarity) == 3.0


def test_a_line_whose_matched_clauses_are_said_elsewhere_is_repeated() -> None:
    """Only clauses holding a window term are asked about; the text itself counts once."""
    text = "spent ten minutes deciding, went with shakshuka"
    usable = {"decid", "shakshuka"}
    asked = phrases.asked([text], usable)
    assert asked == ["spent ten minutes deciding", "went with shakshuka"]
    assert phrases.unique_share(text, usable, dict.fromkeys(asked, 1)) == 1.0
    assert phrases.unique_share(text, usable, {asked[0]: 4, asked[1]: 1}) == 0.5
    assert salience.repeat_factor(0.0) == pytest.approx(1 - salience.REPEATED)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("bought a kayak for $340 from a guy named Dmitri", 2),
        ("signed up at Harlow Community College, Tuesdays", 4),
        ("验光说左眼六百五十度", 1),
        ("每年九月十二号自动扣费", 2),
        ("Good morning! wrapping up soon", 0),
        ("一起去吃饭吧，等一下", 0),
    ],
)
def test_numbers_and_names_are_on_the_surface(text: str, shown: int) -> None:
    """Digits, CJK numerals and capitalised words inside a sentence; not a sentence's start."""
    assert salience.surface(text) == shown


def test_surface_salience_is_bounded() -> None:
    """However many names a text shows, it gains at most 1 + SURFACE."""
    assert salience.factor("plain words only") == 1.0
    assert salience.factor("met Ann, Bob, Cid and Dee at 10 on 5 May") == 1 + salience.SURFACE


def test_an_owners_question_is_answered_and_chatter_read_whole() -> None:
    """A question of the owner with two terms is ANSWER; a stock question or the companion's not."""
    assert reading.reading([say("chatter"), say("when is the welding class?")]) is reading.ANSWER
    assert reading.reading([say("when is the welding class?", "assistant")]) is reading.CHAT
    assert reading.reading([say("你觉得这样呢？")]) is reading.ANSWER
    assert reading.reading([say("你觉得这样呢？")], {"你觉 觉得 得这 这样 样呢"}) is reading.CHAT
    assert reading.reading([say("welding class tonight")]) is reading.CHAT
    assert reading.reading([]) is reading.CHAT


def test_chatter_weighs_every_message_nearly_the_same_and_a_question_first() -> None:
    """Read as chat, a term ten messages back keeps most of its weight; read as a question, not."""
    old = [say("welding class tonight")] + [say(f"filler{i}") for i in range(10)]
    chat = recall.recency(old)
    assert chat["weld"] == pytest.approx(reading.CHAT.decay**10)
    asked = recall.recency([*old, say("what about the kayak trip?")])
    assert asked["weld"] == pytest.approx(reading.ANSWER.decay**11)
    assert asked["kayak"] == 1.0


def test_the_query_takes_rare_terms_within_its_row_budget() -> None:
    """A common term that would pass QUERY_ROWS is passed over for the rarer ones after it."""
    weights = {"alpha": 3.0, "beta": 2.9, "gamma": 2.8}
    df = {"alpha": recall.QUERY_ROWS, "beta": 1, "gamma": 2}
    assert recall.best(weights, df) == ["alpha"]
    df["alpha"] = recall.QUERY_ROWS + 1
    assert recall.best(weights, df) == ["beta", "gamma"]
    assert recall.best({"a": 10.0, "b": 0.5}, {"a": 1, "b": 1}) == ["a"]  # b: under QUERY_SHARE


def test_a_fact_outranks_chatter_sharing_as_much() -> None:
    """Two candidates sharing the same rare words with a window: the one naming things first."""
    window = [say("the welding class was fun"), say("ok")]
    weights = {"weld": 1.0, "class": 1.0}
    df = {"weld": 2, "class": 3}
    chatter = Candidate("message", 1, "welding class again, so tired", T0)
    fact = Candidate("message", 2, "welding class at Harlow College on Tuesdays", T0)
    ranked = recall.rank([chatter, fact], weights, window, df=df, documents=3000)
    assert [c.id for _, c in ranked] == [2, 1]
    top = recall.df_cap(3000) + 1  # rarity counts up from the cap
    said = reading.CHAT.decay  # one message before the newest
    run = math.log(top / 2) + phrases.RUN_WORDS * math.log(top / 3)
    assert ranked[1][0] == pytest.approx(said * run)
