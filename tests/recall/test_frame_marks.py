"""The superseded marks a later call's correction puts on recalled snippets, on the frame's
budget: ``mark_later`` tries only the later texts that carry a correction's cue, each against
the snippets said before it, never every pair of snippets (the rendering judges those once).
The marks are exactly those of the pairwise rule (Hypothesis against it); its work is
counted, not timed (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall import superseded
from pipecat_summarizer._recall.gather import mark_later
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer._recall.superseded import supersede
from pipecat_summarizer.store.records import SearchHit

TEXTS = (
    "Marta and I fly to Lisbon on 14 March.",
    "The hotel check-in is at 3 pm on 14 March.",
    "Actually, make that 21 March, not 14 March.",
    "Sorry, the check-in is at 4 pm, not 3 pm.",
    "The deposit was 250 euros.",
    "Correction: the deposit was 300 euros.",
    "We land in Porto on Sunday.",
    "My booking reference is QX7745.",
)


def pairwise(snippets: list[Snippet], later: list) -> list[Snippet]:
    """The rule as it was written first: every snippet judged against every snippet and every
    later text said after it, twice (with and without the later texts)."""
    seen = {(s.call_id, s.position) for s in snippets}
    extra = [h for h in later if (h.call_id, h.position) not in seen]
    if not extra or not snippets:
        return snippets
    marked, alone = supersede(snippets, (), extra), supersede(snippets)
    pairs = zip(snippets, marked, alone, strict=True)
    return [m if m is not s and a is s else s for s, m, a in pairs]


def _snippet(i: int, text: str, at: float) -> Snippet:
    return Snippet(f"c{i % 4}", i, 0, at, "user", text, 1.0, i)


def _hit(i: int, text: str, at: float) -> SearchHit:
    return SearchHit(f"c{i % 4}", i, 0, at, "user", text, "summarized", -1.0)


rows = st.lists(st.tuples(st.sampled_from(TEXTS), st.integers(0, 20)), max_size=12)


@settings(deadline=None, max_examples=100)
@given(rows, rows)
def test_the_marks_are_the_pairwise_rules(snippet_rows, later_rows):
    snippets = [_snippet(i, t, float(at)) for i, (t, at) in enumerate(snippet_rows)]
    # positions overlap the snippets' on purpose: a later text that is a snippet is skipped
    later = [_hit(i + 6, t, float(at)) for i, (t, at) in enumerate(later_rows)]
    assert mark_later(snippets, later) == pairwise(snippets, later)


def test_later_texts_without_a_cue_cost_no_correction_reading(monkeypatch: pytest.MonkeyPatch):
    calls = []
    real = superseded.find_correction

    def counted(text, details):
        calls.append(text)
        return real(text, details)

    monkeypatch.setattr(superseded, "find_correction", counted)
    snippets = [_snippet(i, TEXTS[i % 2], float(i)) for i in range(40)]
    plain = [_hit(100 + i, TEXTS[4 + i % 2 * 2], 100.0 + i) for i in range(20)]
    assert mark_later(snippets, plain) == snippets
    assert calls == []  # the pairwise rule read 40 x 59 pairs here
    # one later correction: tried against each snippet said before it, once
    fix = _hit(200, TEXTS[2], 500.0)
    marked = mark_later(snippets, [*plain, fix])
    assert len(calls) == len(snippets)
    assert all(s.content.startswith("[superseded: later corrected to 21 March]") for s in marked)
    assert marked == pairwise(snippets, [*plain, fix])
