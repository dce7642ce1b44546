"""A value the recalled snippets state, corrected in a later call by words that share nothing
else with the question: the step's extra search finds the correction and the snippet is marked
superseded once (a correction among the block's own snippets is marked when the block is
rendered, never twice). Pure rule (``gather.mark_later``); the pipeline cases on SQLite and
PostgreSQL are in tests/recall/test_attacks_gather.py."""

from __future__ import annotations

from pipecat_summarizer._recall.gather import mark_later
from pipecat_summarizer._recall.render import render_recall
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer.store.records import SearchHit

TRIP = Snippet("c1", 0, 0, 100.0, "user", "Marta and I fly to Lisbon on 14 March.", 1.0, 0)
FIX = "Actually, make that 21 March, not 14 March."


def test_a_later_correction_marks_the_snippet_it_corrects():
    later = [SearchHit("c2", 0, 0, 200.0, "user", FIX, "summarized", -1.0)]
    (marked,) = mark_later([TRIP], later)
    assert marked.content.startswith("[superseded: later corrected to 21 March]")
    assert marked.content.endswith(TRIP.content)
    # said before the snippet: no correction of it
    earlier = [SearchHit("c0", 0, 0, 50.0, "user", FIX, "summarized", -1.0)]
    assert mark_later([TRIP], earlier) == [TRIP]
    assert mark_later([TRIP], []) == [TRIP] and mark_later([], later) == []


def test_a_correction_among_the_snippets_is_marked_once_when_rendered():
    fix = Snippet("c2", 0, 0, 200.0, "user", FIX, 1.0, 1)
    later = [SearchHit("c2", 0, 0, 200.0, "user", FIX, "summarized", -1.0)]
    snippets = mark_later([TRIP, fix], later)
    assert snippets == [TRIP, fix]  # left to the rendering
    text = render_recall(
        snippets, query="When do we fly?", call_id="c3", max_tokens=400, max_snippet_tokens=60
    )
    assert text is not None and text.count("superseded") == 1
