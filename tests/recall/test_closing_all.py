"""An "all" that closes or checks a turn is not a question asking for every piece (S12-A-2):
"Thanks, that's all" took a list question's largest block in any context."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import gathers
from pipecat_summarizer._recall.select import lists

CLOSING = [
    "Thanks, that's all.",
    "Is that all?",
    "Did you get all that?",
    "Thanks, that's all about the Marquis rooms.",
    "That is all for today, bye.",
    "All right, see you.",
    "Okay, all good.",
    "Nothing at all, thanks.",
    "We're all set.",
]
ASKING = [
    "What are all the books Melanie read?",
    "Is that all of the rooms I booked?",
    "Have you got all my allergies?",
    "What did both of us order?",
    "How many times did I call about the refund?",
    "Which cities has Jon visited?",
]


@pytest.mark.parametrize("text", CLOSING)
def test_a_closing_all_is_not_a_list(text):
    assert not gathers(text)
    assert not lists(text)


@pytest.mark.parametrize("text", ASKING)
def test_a_question_for_every_piece_still_is(text):
    assert lists(text)


_plain = st.sampled_from(
    ["Where did I park", "What is my booking reference", "When is the dentist", "Which room"]
)


@given(_plain, st.sampled_from(CLOSING), st.booleans())
def test_a_closing_phrase_never_makes_a_question_gather(question, closing, before):
    text = f"{closing} {question}?" if before else f"{question}? {closing}"
    assert not gathers(text)


@given(st.sampled_from(ASKING), st.sampled_from(CLOSING), st.booleans())
def test_a_closing_phrase_never_hides_a_list_question(question, closing, before):
    text = f"{closing} {question}" if before else f"{question} {closing}"
    assert lists(text)
