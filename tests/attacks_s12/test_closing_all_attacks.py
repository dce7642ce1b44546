"""Attacks on the closing "all" rule (4153916, ``query.gathers``'s ``_NOT_GATHERING``).

A closing phrase taken for a list question takes the list's largest block (a larger block
than needed); a list question the rule misses loses recall. Both sides are checked on the
pure rule, and a closing phrase with a typographic apostrophe through a real pipeline on
both backends.
"""

from __future__ import annotations

import time

import pytest

from pipecat_summarizer._recall.query import gathers
from pipecat_summarizer._recall.select import lists

#: Closing phrases the rule of 4153916 still took for list questions (all fail before).
CLOSING = [
    "That’s all, thanks.",  # a typographic apostrophe, as speech-to-text and phones write it
    "Thanks, that’s all about the Marquis rooms.",
    "That'll be all.",
    "That’ll be all, thank you.",
    "That will be all for today.",
    "That's about all, bye.",
    "THAT'S REALLY ALL.",
    "Did you get ALL THAT?",
    "Thanks for all your help!",
    "All sorted, thanks.",
    "You’ve been a great help, all the best.",
    "Ok that's it, bye all.",
]
#: Real list questions: must still gather ("all that I ordered" failed before).
ASKING = [
    "What are all the things I said I'm allergic to?",
    "Is that all the rooms?",
    "Is that all of the rooms I booked?",
    "Was that all the rooms I booked?",
    "Are those all the rooms?",
    "Tell me all that I ordered last month.",
    "List all that you noted about my allergies.",
    "Were those all the rooms you’ve got on file?",
    "What’s every room I had at the Marquis?",
    "Did I tell you about all the best restaurants I went to?",
    "What did I say about all the help I asked for with the visa?",
]


@pytest.mark.parametrize("text", CLOSING)
def test_a_closing_all_is_no_list_question(text):
    assert not gathers(text)
    assert not lists(text)


@pytest.mark.parametrize("text", ASKING)
def test_a_list_question_still_gathers(text):
    assert gathers(text)


def test_a_hostile_question_is_read_quickly():
    # the figure is printed (no timed assertion): two regexes over 2,000 characters
    hostile = [
        ("that's " * 300)[:2000],
        ("is that " * 300)[:2000],
        ("all " * 500)[:2000],
        ("that will be " * 200)[:2000],
        ("all that " * 250)[:2000],
        "a" * 2000,
    ]
    worst = 0.0
    for text in hostile:
        started = time.perf_counter()
        for _ in range(50):
            gathers(text)
        worst = max(worst, (time.perf_counter() - started) / 50)
    print(f"gathers, 2,000 hostile characters: worst {worst * 1e3:.3f} ms")
    # read as their words say: no "all", or nothing but "all"
    assert [gathers(t) for t in (hostile[0], hostile[1], hostile[2], hostile[3], hostile[5])] == [
        False,
        False,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    "text", ["That’s all of it, thanks.", "I think that covers it all.", "Okay, I got all of it."]
)
def test_a_closing_all_of_it_is_no_list_question(text):
    assert not gathers(text)
