"""Attacks on the closing "all of it" / "it all" rule (S12-B-3, ``_recall.closings``).

A closing phrase read as a list question takes the list's largest block (more than needed);
a list question the rule drops loses recall. Both ways on the pure rule (``gathers`` and
``select.lists``), and a closing through a real pipeline on SQLite.
"""

from __future__ import annotations

import time

import pytest

from pipecat_summarizer._recall.query import gathers
from pipecat_summarizer._recall.select import lists
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from tests.attacks_s12.test_list_attacks import ROOMS, _recalled
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.support.openai_server import is_summary_request
from tests.support.recall_calls import recall_call

#: Closings and checks that must not gather (every one gathered before the rule).
CLOSING = [
    "I think that covers absolutely all of it.",
    "That's all of it now, I think.",
    "That about covers all of it.",
    "You\u2019ve got it all, cheers!",
    "I think we covered it all.",
    "That sums it all up, thanks.",
    "Ok you have all of it now.",
    "Great, that covers it all then?",
    "Alright, I've said it all.",
    "Cool, got all of it?",
    "I hope that covers it all\u2026",
    "That covers it all \u2014 bye.",
    "THAT COVERS IT ALL.",
    "that covers it all lol",
    "That covers it all, doesn't it?",
    "That's all of it I think.",
    "That covers it all for today.",
    "Did you get it all down?",
    "okay I got all of it thank you",  # speech-to-text without punctuation
    "Is that all of it then?",
    "Does that cover all of it?",
    "Sorry, did you get all of it?",
    "Did you get all of it, Ava?",
    "I told you my address. Did you get all of it?",
    "Where did I go? Did you get all of it?",  # a question for one thing, then a check
    "What is my address? Got it all?",
    "Peanuts and shellfish, that's all of it.",
    "So that wraps it all up.",
    "Anything else?\nNo, that's all of it, thanks.",  # the assistant's question before
    "That\u2019s all of it, thanks. Where did I park?",
    "Okay, I got all of it.",
    "I think that covers it all.",
    "That\u2019s all of it, thanks.",
]
#: List questions that must still gather or list (each read so before the rule).
ASKING = [
    "did I pay it all back?",
    "Is that all of the rooms?",
    "Tell me all that I ordered",
    "Did I cover it all?",  # about the caller: kept
    "So did my insurance cover all of it?",
    "Where did I spend it all?",
    "What did I spend it all on?",
    "Who got all of it?",
    "How much was it all?",
    "The rooms, have you got it all?",
    "My allergies \u2014 do you have it all?",
    "About my trips: have you got it all?",
    "Did you catch all of it, the meds I take?",
    "Is that all of it, the rooms I booked at the Marquis?",
    "What are my allergies? Have you got it all?",
    "Which meds? Have you got it all?",
    "What rooms did I book? Is that all of it?",
    "Tell me what I bought; have you got it all?",
    "Where did we go in May, did I cover it all?",
    "Did you get it all, the dates and the rooms?",
    "Have you got all of it from last week's call?",
    "So what did the insurance cover, all of it?",
    "Give me all of it.",
    "Can you read all of it back?",
    "I want to hear it all.",
]


@pytest.mark.parametrize("text", CLOSING)
def test_a_closing_all_of_it_does_not_gather(text):
    assert not gathers(text)
    assert not lists(text)


@pytest.mark.parametrize("text", ASKING)
def test_a_list_question_with_all_of_it_still_lists(text):
    assert lists(text)


#: Questions for one thing, beside a closing: they never gather.
PLAIN = [
    "Where did I park?",
    "What is my booking reference?",
    "When is the dentist?",
    "Which room?",
]
#: The closings that end in punctuation (a closing run into the next words without any is
#: read as one clause with them).
ENDED = [c for c in CLOSING if c.rstrip()[-1] in ".!?\u2026"]


@pytest.mark.parametrize("closing", ENDED)
def test_a_closing_beside_a_plain_question_does_not_gather(closing):
    said = [f"{closing} {q}" for q in PLAIN] + [f"{q} {closing}" for q in PLAIN]
    assert [t for t in said if gathers(t)] == []


@pytest.mark.parametrize("question", ASKING)
def test_a_closing_beside_a_list_question_keeps_it_a_list(question):
    said = [f"{c} {question}" for c in ENDED] + [f"{question} {c}" for c in ENDED]
    assert [t for t in said if not lists(t)] == []


#: Known misses (S13-Q-1): a bare "all of it" clause with no closing verb is left to gather
#: ("Give me everything, all of it." asks for a list), and so is a check about the caller
#: or the caller's side ("we").
@pytest.mark.xfail(strict=True, reason="S13-Q-1: a bare or first-person closing 'all of it'")
@pytest.mark.parametrize(
    "text", ["Yep, all of it, thanks.", "That's it, all of it.", "Have we got it all?"]
)
def test_a_bare_or_first_person_closing_does_not_gather(text):
    assert not gathers(text)


#: Known miss (S13-Q-2): what is checked, named in a sentence of its own before the check;
#: "My trips." reads as a statement ("I told you my address. Did you get all of it?").
@pytest.mark.xfail(strict=True, reason="S13-Q-2: a check naming its topic a sentence before")
def test_a_check_after_a_sentence_naming_the_topic_still_lists():
    assert lists("My trips. Have you got it all?")


def test_hostile_checks_are_read_quickly():
    # the figure is printed (no timed assertion); every match reads its clause and sentence
    hostile = [
        ("that covers it all, " * 100)[:2000],
        ("did you get all of it? " * 90)[:2000],
        ("so " * 600)[:1980] + "did you get it all?",
        ("the rooms " * 190) + ", did you get it all?",
        ("got it all." * 200)[:2000],
        ("a, " * 700)[:1990] + "got it all?",
    ]
    worst = 0.0
    for text in hostile:
        started = time.perf_counter()
        for _ in range(20):
            gathers(text)
        worst = max(worst, (time.perf_counter() - started) / 20)
    print(f"gathers, 2,000 hostile characters of checks: worst {worst * 1e3:.3f} ms")
    # a repeated question or a named topic still gathers; closings alone do not
    assert [gathers(t) for t in hostile] == [False, True, False, True, False, True]


@pytest.mark.parametrize(
    "closing",
    [
        "Marquis rooms noted; I think that covers it all, thanks.",
        "The Marquis rooms and their minibar codes: that\u2019s all of it, thanks.",
    ],
    ids=["covers-it-all", "all-of-it-curly"],
)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_closing_all_of_it_takes_no_list_block(openai_server, store_target, closing):
    openai_server.handler = plain
    store = open_store(store_target)
    # request_tokens leaves a question about one thing about 400 tokens beside the ~300-token
    # context; a list question would take up to max_tokens (1600)
    recall = RecallParams(
        latency_budget_s=5.0, max_tokens=1600, min_tokens=100, max_snippets=48, request_tokens=700
    )
    said = [
        f"Tell me about the spa, day {i}: the sauna, the pool and the towels, please, in detail."
        for i in range(6)
    ]
    try:
        await store.write(archived(ROOMS, call_id="a1", at=utc(2026, 4, 1), user_id="alice"))
        await recall_call(
            openai_server, store, [*said, closing], call_id="q1", recall=recall, system="Hi."
        )
    finally:
        await store.close()
    last = [b for b in openai_server.chat_requests if not is_summary_request(b)][-1]
    (block,) = _recalled([last])
    assert "Marquis" in block  # recall answered the turn, under the cap of one thing
    assert EstimateTokenCounter().count_message({"role": "user", "content": block}) <= 700
