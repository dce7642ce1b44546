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
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.select import lists
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from tests.attacks_s12.test_list_attacks import ROOMS
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.support.openai_server import is_summary_request
from tests.support.recall_calls import recall_call

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
    assert all(len(t) == 2000 for t in hostile)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_curly_closing_all_keeps_the_small_block(openai_server, store_target):
    # as test_list_attacks.test_thats_all_is_not_a_list_question, with "’" (fails before:
    # the list's larger block, over request_tokens)
    openai_server.handler = plain
    store = open_store(store_target)
    recall = RecallParams(
        latency_budget_s=5.0, max_tokens=1600, min_tokens=100, max_snippets=48, request_tokens=700
    )
    said = [
        f"Tell me about the spa, day {i}: the sauna, the pool and the towels, please, in detail."
        for i in range(6)
    ]
    closing = "Thanks, that’s all about the Marquis rooms."
    try:
        await store.write(archived(ROOMS, call_id="a1", at=utc(2026, 4, 1), user_id="alice"))
        await recall_call(
            openai_server, store, [*said, closing], call_id="q1", recall=recall, system="Hi."
        )
    finally:
        await store.close()
    last = [b for b in openai_server.chat_requests if not is_summary_request(b)][-1]
    blocks = [str(m["content"]) for m in last["messages"] if is_recall_message(m)]
    assert len(blocks) == 1
    counter = EstimateTokenCounter()
    assert counter.count_message({"role": "user", "content": blocks[0]}) <= 700


@pytest.mark.xfail(
    strict=True,
    reason="S12-B-3: a closing 'all of it' / 'it all' still reads as a list question",
)
@pytest.mark.parametrize(
    "text", ["That’s all of it, thanks.", "I think that covers it all.", "Okay, I got all of it."]
)
def test_a_closing_all_of_it_is_no_list_question(text):
    assert not gathers(text)
