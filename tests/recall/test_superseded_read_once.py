"""supersede and stated_values read each text once (a text without a correction's cue is never
tried as a correction; a message's values are read once and kept): the same answers as the
rules written pair by pair and value by value (property tests, hypothesis)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer._recall.superseded import (
    SUPERSEDED_MARK,
    _in_view_corrections,
    _key,
    _replaced,
    stated_values,
    supersede,
)
from pipecat_summarizer._record.corrections import find_correction, values

SAID = [
    "The booking is on 14 March at 3pm.",
    "Make that 21 March, not 14 March.",
    "Actually it's 4pm.",
    "My reference is AB-1234.",
    "Sorry, the reference is AB-9999.",
    "I have 3 tickets for Monday.",
    "Change it to 5 tickets.",
    "We land on Tuesday, 2 June 2023.",
    "No, the flight is on Wednesday.",
    "The room costs $120 a night, room 418.",
    "Thanks, that's all.",
    "Mary and Jon Smith booked it.",
]
VIEW = [
    "date: 21 March (corrected from 14 March)",
    "time: 4pm (corrected from 3pm)",
    "the caller likes tea",
    "",
]


def _snippet(text: str, at: float, call_id: str, position: int) -> Snippet:
    return Snippet(call_id, position, 1, at, "user", text, 1.0, 0)


snippets = st.lists(
    st.builds(
        _snippet,
        st.sampled_from(SAID),
        st.sampled_from([1.0, 2.0, 3.0]),
        st.sampled_from(["c1", "c2"]),
        st.integers(0, 3),
    ),
    max_size=8,
)


def _reference(found, in_view=(), later=()):
    """supersede as written pair by pair: every later text tried against every snippet."""
    extra = sorted(later, key=_key)
    corrections = _in_view_corrections(in_view)
    kept = [s for s in found if not (corrections and _replaced(s.content, corrections))]
    order = sorted(range(len(kept)), key=lambda i: (kept[i].at, kept[i].call_id, kept[i].position))
    out = list(kept)
    for n, i in enumerate(order):
        after = [kept[j] for j in order[n + 1 :]]
        after += [e for e in extra if _key(e) > _key(kept[i])]
        for text in after:
            correction = find_correction(text.content, [(None, kept[i].content)])
            if correction is not None:
                mark = SUPERSEDED_MARK.format(new=correction.new)
                out[i] = dataclasses.replace(kept[i], content=mark + kept[i].content)
                break
    return out


@settings(max_examples=400, deadline=None)
@given(snippets, st.lists(st.sampled_from(VIEW), max_size=2), snippets)
def test_supersede_marks_as_every_pair_tried(found, in_view, later):
    assert supersede(found, in_view, later) == _reference(found, in_view, later)


def test_a_tie_in_time_and_place_is_judged_in_the_order_given():
    # the same key twice: the one listed later is "after" the other (as sorted, stably)
    first = _snippet("The booking is on 14 March at 3pm.", 1.0, "c1", 0)
    second = _snippet("Make that 21 March, not 14 March.", 1.0, "c1", 0)
    assert supersede([first, second])[0].content.startswith("[superseded")
    assert supersede([second, first]) == _reference([second, first])


@settings(max_examples=400, deadline=None)
@given(snippets, st.integers(1, 4))
def test_stated_values_as_read_value_by_value(found, limit):
    want: list[str] = []
    for s in found:
        for v in values(s.content):
            if v.kind != "name" and v.text.lower() not in (f.lower() for f in want):
                want.append(v.text)
    assert stated_values(found, limit) == want[:limit]
