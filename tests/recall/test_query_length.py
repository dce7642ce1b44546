"""A very long caller turn: the query reads only its end (``MAX_QUERY_CHARS``), so ranking a
100 KB turn's hits costs what a normal question costs, on the event loop. And the relevance
rule, now splitting a query's date words once per query, scores as before. Pure."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import (
    MAX_QUERY_CHARS,
    is_when,
    recall_query,
    tail,
    topic_terms,
)
from pipecat_summarizer._recall.select import _stems, relevance


def test_a_100_kb_turn_is_read_by_its_end():
    question = "So which hotel did we book in Lisbon?"
    turn = " ".join(f"word{i} hotel{i}" for i in range(8000)) + " " + question
    assert len(turn) > 100_000
    query = recall_query(
        [{"role": "system", "content": "You help."}, {"role": "user", "content": turn}]
    )
    assert query is not None and len(query) <= MAX_QUERY_CHARS
    assert query.endswith(question)  # the question, at the end of the turn, is kept
    assert len(topic_terms(query)) < 700  # not the turn's 16,000 topic words


def test_a_normal_turn_is_read_whole():
    turn = "Hi again. Which hotel did we book in Lisbon, and for which dates?"
    assert recall_query([{"role": "user", "content": turn}]) == turn


@settings(deadline=None)
@given(st.text(alphabet=st.sampled_from("ab c\n"), max_size=300), st.integers(1, 200))
def test_tail_is_a_suffix_within_the_limit(text, limit):
    out = tail(text, limit)
    assert text.endswith(out) and len(out) <= max(limit, 0)
    if len(text) <= limit:
        assert out == text


def _old_relevance(terms, text, rare=(), *, strict=True, need=None):
    # the rule before the date words were split once per query (reference)
    if not terms:
        return 0.0
    present = _stems(text)
    core = [t for t in terms if not is_when(t)] or list(terms)
    shared = [t for t in core if t in present]
    when = sum(1 for t in terms if t not in core and t in present)
    if need is None:
        need = 2 if len(core) > 2 else 1
    strong = len(shared) + when >= need or bool(set(shared) & set(rare))
    if not shared or (strict and not strong):
        return 0.0
    return (len(shared) + when) / (len(core) + when)


WORDS = ["hotel", "lisbon", "march", "2023", "7", "weekend", "room", "pool", "book", "night"]


@settings(deadline=None, max_examples=300)
@given(
    st.lists(st.sampled_from(WORDS), max_size=8),
    st.lists(st.sampled_from(WORDS), max_size=10),
    st.lists(st.sampled_from(WORDS), max_size=2),
    st.booleans(),
)
def test_relevance_scores_as_before(query, said, rare, strict):
    terms = topic_terms(" ".join(query))
    text = " ".join(said)
    rare_terms = topic_terms(" ".join(rare))
    assert relevance(terms, text, rare_terms, strict=strict) == _old_relevance(
        terms, text, rare_terms, strict=strict
    )
