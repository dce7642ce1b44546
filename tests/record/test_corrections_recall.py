"""A recalled snippet carrying a detail corrected since: left out when the correction is in
view, marked superseded when a later snippet of the block corrects it."""

from __future__ import annotations

from pipecat_summarizer._recall.render import render_recall
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer._recall.superseded import supersede


def _snippet(content: str, position: int, *, call_id: str = "c1", at: float = 100.0) -> Snippet:
    return Snippet(call_id, position, 1, at + position, "user", content, 1.0, position)


OLD = _snippet("Our anniversary dinner is on 14 March, a table for 4 people.", 0)
OTHER = _snippet("My sister's birthday is on 14 March too.", 1)
FIX = _snippet("Make that 21 March.", 2)
IN_VIEW = [
    "FACTS:\n- Our anniversary dinner is on 21 March, a table for 4 people."
    " (corrected from 14 March)"
]


def test_a_snippet_with_the_old_value_is_left_out_when_the_correction_is_in_view():
    assert supersede([OLD, OTHER], IN_VIEW) == [OTHER]  # the other topic stays
    assert supersede([OLD, OTHER]) == [OLD, OTHER]  # nothing in view corrects them


def test_a_snippet_a_later_one_corrects_is_marked_superseded():
    marked, fix = supersede([OLD, FIX])
    assert marked.content.startswith("[superseded: later corrected to 21 March] ")
    assert fix == FIX
    # whatever order the ranking gave them
    fix, marked = supersede([FIX, OLD])
    assert marked.content.startswith("[superseded: later corrected to 21 March] ")


def test_render_recall_applies_it():
    text = render_recall(
        [OLD, OTHER], query="when is the dinner", call_id="c1", max_tokens=200,
        max_snippet_tokens=60, in_view=IN_VIEW,
    )  # fmt: skip
    assert text is not None and "14 March, a table" not in text and "birthday" in text
    text = render_recall(
        [OLD, FIX], query="when is the dinner", call_id="c1", max_tokens=200,
        max_snippet_tokens=60,
    )  # fmt: skip
    assert text is not None and "[superseded: later corrected to 21 March]" in text
