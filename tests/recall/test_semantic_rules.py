"""Semantic recall's pure rules: the top matches, the fusion with the lexical hits, and the
``min_similarity`` hook of ``select_hits`` (no model: vectors are given)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from pipecat_summarizer._recall.embedding import unit_rows
from pipecat_summarizer._recall.fusion import SemanticHit, fuse, top_matches
from pipecat_summarizer._recall.select import View, select_hits
from pipecat_summarizer.params import RecallParams

sims_lists = st.lists(
    st.floats(min_value=-1, max_value=1, allow_nan=False, width=32), min_size=0, max_size=60
)


@given(sims_lists, st.integers(min_value=0, max_value=70), st.floats(min_value=-1, max_value=1))
def test_top_matches_are_the_k_best_above_the_floor_best_first(sims, k, floor):
    arr = np.array(sims, dtype=np.float32)
    got = top_matches(arr, k, floor)
    assert len(got) <= k
    values = [s for _, s in got]
    assert values == sorted(values, reverse=True)
    assert all(s >= floor for s in values)
    assert len({r for r, _ in got}) == len(got)
    # exactly what a full sort keeps (same values: ties may pick other rows)
    expected = sorted((float(x) for x in arr), reverse=True)[:k]
    assert values == [s for s in expected if s >= floor]
    for r, s in got:
        assert float(arr[r]) == s


def test_top_matches_prefer_the_later_message_on_a_tie():
    assert top_matches(np.array([0.5, 0.5, 0.1], dtype=np.float32), 1, 0.0) == [(1, 0.5)]


@dataclass
class Hit:
    call_id: str
    position: int
    content: str = "text"
    role: str = "user"
    turn: int = 1
    at: float = 0.0


keys = st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=15))


@given(st.lists(keys, max_size=20), st.lists(keys, max_size=20), st.data())
def test_fuse_puts_lexical_hits_first_in_order_then_new_ones_each_once(lex, sem, data):
    lexical = [Hit(c, p) for c, p in lex]
    semantic = [
        SemanticHit(c, p, 1, 0.0, "user", "text", similarity=0.9 - i / 100)
        for i, (c, p) in enumerate(sem)
    ]
    similarity = {k: data.draw(st.floats(-1, 1)) for k in set(sem)}
    fused = fuse(lexical, semantic, similarity)
    got = [(h.call_id, h.position) for h in fused]
    assert len(got) == len(set(got))  # each message once
    lex_once = list(dict.fromkeys(lex))
    assert got[: len(lex_once)] == lex_once  # lexical first, in the archive's order
    new = [k for k in dict.fromkeys(sem) if k not in set(lex)]
    assert got[len(lex_once) :] == new  # then by meaning only, in their order
    for h in fused[: len(lex_once)]:
        assert h.lexical_rank is not None
        assert h.similarity == similarity.get((h.call_id, h.position))
    assert all(h.lexical_rank is None for h in fused[len(lex_once) :])


def test_fuse_keeps_the_first_lexical_rank_of_a_repeated_hit():
    fused = fuse([Hit("a", 1), Hit("a", 2), Hit("a", 1)], [], {})
    assert [(h.position, h.lexical_rank) for h in fused] == [(1, 0), (2, 1)]


def _hit(text: str, similarity: float | None, position: int = 0) -> SemanticHit:
    return SemanticHit("c1", position, 1, 0.0, "user", text, similarity=similarity)


PARAMS = RecallParams()
EMPTY = View("", frozenset())


def test_a_close_paraphrase_passes_only_with_the_similarity_floor():
    hit = _hit("Our dog Rex is a golden retriever.", 0.45)
    query = "What kind of animal is my pet?"
    assert select_hits([hit], query, EMPTY, PARAMS) == []  # no shared word
    assert select_hits([hit], query, EMPTY, PARAMS, min_similarity=0.5) == []
    chosen = select_hits([hit], query, EMPTY, PARAMS, min_similarity=0.3)
    assert [s.text for s in chosen] == [hit.content]
    assert chosen[0].relevance == 0.0  # the lexical share stays what it is


def test_the_similarity_floor_keeps_the_other_rules():
    query = "What kind of animal is my pet?"
    rex = "Our dog Rex is a golden retriever."
    # already in view (verbatim in the context): not recalled, however close
    view = View(rex.lower(), frozenset({"dog", "rex", "golden", "retriever"}))
    assert select_hits([_hit(rex, 0.9)], query, view, PARAMS, min_similarity=0.3) == []
    # instructions are never recalled
    system = SemanticHit("c1", 0, 1, 0.0, "system", rex, similarity=0.9)
    assert select_hits([system], query, EMPTY, PARAMS, min_similarity=0.3) == []
    # the same words twice: once
    twice = [_hit(rex, 0.9, 0), _hit(rex, 0.9, 5)]
    assert len(select_hits(twice, query, EMPTY, PARAMS, min_similarity=0.3)) == 1
    # a hit not yet embedded (similarity None) is judged by its words only
    assert select_hits([_hit(rex, None)], query, EMPTY, PARAMS, min_similarity=0.3) == []


@given(
    st.lists(
        st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=4, max_size=4),
        min_size=1,
        max_size=8,
    )
)
@example([[0.0, 0.0, 0.0, 1.41e-22]])  # found by hypothesis: a float32 norm came out 1.009
def test_unit_rows_are_unit_or_zero(rows):
    v = unit_rows(np.array(rows, dtype=np.float32))
    norms = np.linalg.norm(v, axis=1)
    assert np.all(np.isfinite(v))
    assert all(abs(n - 1) < 1e-3 or n == 0 for n in norms)


def test_unit_rows_turn_nan_into_zero():
    assert np.all(unit_rows(np.array([[np.nan, 1.0, 0.0]])) == np.array([[0.0, 1.0, 0.0]]))
