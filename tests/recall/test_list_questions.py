"""A question that asks for a list ("What books has Melanie read?") gets room for its pieces
even in a long context: each piece matches the question no better than the others, and the
context's cap cut the later ones (LoCoMo's multi-hop questions at question time). The rule
(:func:`lists`, :func:`block_cap` with ``listing``), then one returning caller's list question
asked from a long context through real pipelines, on a SQLite file and a real PostgreSQL."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.compose import LEAST_WEAK
from pipecat_summarizer._recall.query import gathers
from pipecat_summarizer._recall.select import (
    View,
    block_budget,
    block_cap,
    lists,
    select_hits,
)
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import open_store
from tests.recall.test_adaptive import sizes, snippets
from tests.recall.test_adaptive_context import (
    DETAILS,
    LONG_SYSTEM,
    RECALL,
    _plain,
    _records,
    _snippets,
    params,
)
from tests.support.recall_calls import FAST, recall_block, recall_call

PARAMS = RecallParams(max_snippets=48)

LISTS = [
    "What books has Melanie read?",
    "Which cities has Jon visited?",
    "What LGBTQ+ events has Caroline participated in?",
    "What instruments does Melanie play?",
    "What has Melanie painted?",
    "In what ways is Caroline participating in the LGBTQ community?",
    "What are some changes Caroline has faced?",
    "What kinds of food do you serve?",
    "What are all the plans with my sister?",  # gathers
]
NOT_LISTS = [
    "What is Caroline's relationship status?",
    "What does Jon's dance studio offer?",
    "Where did Caroline move from 4 years ago?",
    "What kind of art does Caroline make?",
    "When is checkout?",
    "What was the room number again?",
    "Is the pool open on weekends?",
]


def test_a_question_asking_for_a_list_is_told_from_one_asking_for_one_thing():
    assert [q for q in LISTS if not lists(q)] == []
    assert [q for q in NOT_LISTS if lists(q)] == []


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(st.text(max_size=80))
def test_every_gathering_question_asks_for_a_list(text):
    if gathers(text):
        assert lists(text)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(params, st.integers(0, 20_000), st.integers(0, 20_000))
def test_a_list_gets_at_least_the_cap_of_one_thing_and_still_follows_the_context(p, a, b):
    short, long_ = sorted((a, b))
    for context in (short, long_):
        tokens, snippets = block_cap(p, context, listing=True)
        assert block_cap(p, context) <= (tokens, snippets)
        assert p.min_tokens <= tokens <= p.max_tokens
        assert 1 <= snippets <= p.max_snippets
        assert (tokens, snippets) == (p.max_tokens, p.max_snippets)  # whatever the context
    assert block_cap(p, long_, listing=True) <= block_cap(p, short, listing=True)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(snippets, sizes)
def test_a_list_is_never_given_a_smaller_block_than_one_thing(found, size):
    lo, hi = size
    listed = block_budget(found, lo, hi, listing=True)
    assert block_budget(found, lo, hi) <= listed <= hi
    if found:  # one hit with every word is not the whole list: not the small block
        assert listed == hi


def _hit(i: int, text: str) -> SimpleNamespace:
    return SimpleNamespace(call_id=f"c{i}", position=0, turn=0, at=0.0, role="user", content=text)


#: Hits that share two of the query's three words (strong) or one (weak, the filling).
STRONG = "The rosemary by the garden gate is planted."
WEAK = "The garden needs rain."


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(st.lists(st.booleans(), max_size=30), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_the_filling_takes_at_most_its_share_of_weak_hits_per_strong_match(kinds, share):
    query = "Where is the rosemary planted in my garden?"
    # each hit's words differ (a number), so none is a duplicate of another
    hits = [_hit(i, f"{STRONG if strong else WEAK} {i}") for i, strong in enumerate(kinds)]
    view = View("", frozenset())
    every = select_hits(hits, query, view, PARAMS)
    cut = select_hits(hits, query, view, PARAMS, weak_per_strong=share)
    strong = [s for s in every if "rosemary" in s.content]
    weak = [s for s in cut if "rosemary" not in s.content]
    assert [s for s in cut if "rosemary" in s.content] == strong  # strong matches kept
    assert len(weak) <= math.ceil(share * len(strong))
    assert cut == every[: len(cut)]  # the same order: the filling's later hits left out


# -- through real pipelines ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_list_question_in_a_long_context_gets_every_piece(openai_server, store_target):
    openai_server.handler = _plain
    store = open_store(store_target)
    blocks = {}
    try:
        for name, question in (
            ("list", "What plants have I planted in my garden?"),
            ("one", "Where is the rosemary planted in my garden?"),
        ):
            user_id = f"caller-{name}"
            for k, text in enumerate(DETAILS):
                await store.write(_records(k, text, user_id))
            openai_server.requests.clear()
            await recall_call(
                openai_server,
                store,
                [question],
                call_id=f"q-{name}",
                recall=RECALL,
                system=LONG_SYSTEM,  # ~1,100 of request_tokens' 1,500
                memory=MemoryParams(writer=FAST),
                user_id=user_id,
            )
            blocks[name] = recall_block(openai_server)
    finally:
        await store.close()
    # the list: all twelve details, though the context leaves room for fewer (the old
    # cap kept 4 of them)
    assert len(_snippets(blocks["list"])) == len(DETAILS)
    assert estimate_text_tokens(blocks["list"]) <= RECALL.max_tokens
    # a question about one thing still gets what the context leaves
    assert 1 <= len(_snippets(blocks["one"])) < len(DETAILS)
    assert "rosemary" in blocks["one"]


#: One strong match (two of the question's three words) and weaker hits (one word each):
#: more of them than the filling's floor in a long context (``compose.LEAST_WEAK``).
GARDEN = [
    "The rosemary is planted by the gate.",
    *(f"My garden had {n} visitors on the open day." for n in range(3, 4 + LEAST_WEAK)),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_in_a_long_context_the_filling_gives_way_to_a_question_about_one_thing(
    openai_server, store_target
):
    openai_server.handler = _plain
    store = open_store(store_target)
    blocks = {}
    try:
        for name, system in (
            ("short", "You are a garden centre's assistant."),
            ("long", LONG_SYSTEM),
        ):
            user_id = f"caller-{name}"
            for k, text in enumerate(GARDEN):
                await store.write(_records(k, text, user_id))
            openai_server.requests.clear()
            await recall_call(
                openai_server,
                store,
                ["Where is the rosemary planted in my garden?"],
                call_id=f"q-{name}",
                recall=RECALL,
                system=system,
                memory=MemoryParams(writer=FAST),
                user_id=user_id,
            )
            blocks[name] = recall_block(openai_server)
    finally:
        await store.close()
    # a new call's short context: the block is filled with the weaker hits after the match
    assert "rosemary" in blocks["short"] and len(_snippets(blocks["short"])) > 2
    # a long context leaves the block little room: one weak hit per strong match, but
    # never fewer than LEAST_WEAK (the old rule filled it with as many as fitted)
    assert "rosemary" in blocks["long"]
    assert len(_snippets(blocks["long"])) <= 1 + LEAST_WEAK < len(GARDEN)
