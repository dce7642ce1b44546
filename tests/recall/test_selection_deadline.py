"""Recall's selection and rendering under the frame's deadline (pure): hits are judged best
first and quoted until the deadline, what is chosen by then is kept; with no deadline (or one
never reached) the selection and the block are exactly what they were without one.

Property tests (hypothesis) on random hit lists; the clock is a counter, so nothing is timed."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.gather import with_gathered
from pipecat_summarizer._recall.render import render_recall
from pipecat_summarizer._recall.select import PAST_DEADLINE_HITS, make_view, select_hits
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store.records import SearchHit

QUERY = "Which hotel room and flight did we book in Lisbon for the museum trip?"
VOCABULARY = (
    "hotel room flight book Lisbon museum trip Marquis rental car plate Sunday peanuts "
    "daughter ticket restaurant Porto train Gulbenkian Fiat blue"
).split()

sentence = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8).map(" ".join)
hit_lists = st.lists(
    st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]), sentence, st.booleans()),
    max_size=40,
)
views = st.lists(sentence, max_size=3)
params = st.builds(
    RecallParams,
    max_snippets=st.integers(1, 12),
    min_score=st.sampled_from([0.1, 0.25, 0.5]),
    fill=st.booleans(),
)


def _found(rows: list[tuple[str, str, bool]]):
    hits, replies = [], {}
    for i, (role, content, answered) in enumerate(rows):
        call_id = f"c{i % 3}"
        hits.append(SearchHit(call_id, i, i, 1.7e9 + i, role, content, "summarized", -1.0, "u1"))
        if answered:
            replies[(call_id, i)] = ("assistant", f"{content} Lisbon reply {i}")
    return hits, replies


def ticks(start: int = 0):
    """A clock that moves one step each time it is read."""
    counter = itertools.count(start)
    return lambda: float(next(counter))


@settings(deadline=None, max_examples=150)  # a loaded machine: no timing in these properties
@given(hit_lists, views, params, st.integers(1, 12))
def test_with_no_deadline_reached_the_selection_is_unchanged(rows, seen, p, most):
    hits, replies = _found(rows)
    view = make_view(seen)
    before = select_hits(hits, QUERY, view, p, replies=replies)
    assert select_hits(hits, QUERY, view, p, replies=replies, deadline=math.inf) == before
    # never reached on a clock that moves: the same
    late = select_hits(hits, QUERY, view, p, replies=replies, deadline=1e9, clock=ticks())
    assert late == before
    # the caller keeping the first ``most``: the same first ``most``, whatever is cut after
    cut = select_hits(hits, QUERY, view, p, replies=replies, most=most)
    assert cut[:most] == before[:most]


@settings(deadline=None, max_examples=150)
@given(hit_lists, views, params, st.integers(0, 40))
def test_at_the_deadline_what_is_chosen_so_far_is_kept(rows, seen, p, reads):
    hits, replies = _found(rows)
    view = make_view(seen)
    full = select_hits(hits, QUERY, view, p, replies=replies)
    # the clock is read once per hit judged: the deadline passes at the hit ranked ``reads``
    bounded = select_hits(hits, QUERY, view, p, replies=replies, deadline=reads, clock=ticks())
    # the first strong match is chosen when it is ranked before the deadline, or among the
    # few hits judged past it with none chosen yet; never a hit the full selection lacks
    reachable = bool(full) and full[0].rank < reads + PAST_DEADLINE_HITS
    assert bool(bounded) == reachable
    if reachable:
        assert bounded[0] == full[0]
    assert len(bounded) <= p.max_snippets
    if not p.fill:
        # ... and without filling, what is chosen is the start of the full selection
        assert bounded == full[: len(bounded)]
    # past from the start: the first few hits judged, one strong match at most
    past = select_hits(hits, QUERY, view, p, replies=replies, deadline=-1.0, clock=ticks())
    if not p.fill:
        assert past == (full[:1] if full and full[0].rank < PAST_DEADLINE_HITS else [])


def test_past_the_deadline_a_late_answer_without_a_strong_match_is_not_judged_to_its_end():
    """A late answer (an earlier question's hits, judged against this turn's) may hold no
    strong match at all: past the deadline only a few more hits are judged for one."""
    rows = [("user", f"Porto train Sunday {i}", False) for i in range(39)]
    rows.append(("user", "hotel room Lisbon", True))
    hits, replies = _found(rows)
    p = RecallParams(max_snippets=8)
    full = select_hits(hits, QUERY, make_view([]), p, replies=replies)
    assert full and full[0].rank == 39  # the only strong match, last
    reads = []

    def clock() -> float:
        reads.append(1)
        return 1.0

    past = select_hits(hits, QUERY, make_view([]), p, replies=replies, deadline=0.0, clock=clock)
    assert past == [] and len(reads) == PAST_DEADLINE_HITS + 1


@settings(deadline=None, max_examples=100)
@given(hit_lists, hit_lists, params)
def test_the_second_search_adds_nothing_after_the_deadline(rows, more_rows, p):
    hits, replies = _found(rows)
    view = make_view([])
    first = select_hits(hits, QUERY, view, p, replies=replies)
    more = _found(more_rows)
    gathered = ["Porto", "train"]
    full = with_gathered(first, more, QUERY, view, gathered, p)
    assert with_gathered(first, more, QUERY, view, gathered, p, deadline=math.inf) == full
    assert with_gathered(first, more, QUERY, view, gathered, p, deadline=-1.0) == first


@settings(deadline=None, max_examples=100)
@given(hit_lists, st.integers(40, 4000))
def test_the_block_is_rendered_until_the_deadline(rows, max_tokens):
    hits, replies = _found(rows)
    p = RecallParams(max_snippets=40, fill=True)
    snippets = select_hits(hits, QUERY, make_view([]), p, replies=replies)
    kwargs = {"query": QUERY, "call_id": "c0", "max_tokens": max_tokens, "max_snippet_tokens": 60}
    full = render_recall(snippets, **kwargs)
    assert render_recall(snippets, **kwargs, deadline=math.inf) == full
    past = render_recall(snippets, **kwargs, deadline=-1.0, clock=ticks())
    if full is None:
        assert past is None
    else:  # the first snippet that fits is quoted, no more
        assert past is not None and len(past.splitlines()) == 2
        # its quotes as the full block's (a label may differ: a call's label is said once
        # for a run of its lines, "same call" after it)
        assert past.splitlines()[1].split("] ", 1)[1] in [
            line.split("] ", 1)[1] for line in full.splitlines()[1:]
        ]
