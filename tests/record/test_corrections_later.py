"""A value corrected in a later call is never recalled as current: the values the recalled
snippets state (:func:`stated_values`) are searched in the caller's archive, and a text said
after a snippet that corrects it, given to :func:`supersede` as ``later``, marks the snippet
superseded (the correction "make that 21 March, not 14 March" shares no word with "When do
Marta and I fly to Lisbon?"). On a real SQLite file and the real PostgreSQL: the search that
finds the correction is the store's own."""

from __future__ import annotations

from pipecat_summarizer._recall.superseded import SUPERSEDED_MARK, stated_values, supersede
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage, SearchHit

SAID = [
    ("c1", 100.0, ["My sister Marta lives in Porto.", "Lovely."]),
    ("c2", 200.0, ["Marta and I fly to Lisbon on 14 March.", "Noted, 14 March."]),
    ("c3", 300.0, ["Actually, make that 21 March, not 14 March.", "Done, 21 March."]),
]


def _rows() -> list[ArchivedMessage]:
    return [
        ArchivedMessage(
            call_id=call,
            position=i,
            role=("user", "assistant")[i % 2],
            content=text,
            message_json="{}",
            at=at + i,
            user_id="alice",
        )
        for call, at, texts in SAID
        for i, text in enumerate(texts)
    ]


def _hit(call: str, position: int, at: float, content: str) -> SearchHit:
    return SearchHit(call, position, 0, at, "user", content, "summarized", 1.0, "alice")


async def test_a_correction_found_by_the_stated_value_marks_the_snippet(store_target):
    store = open_store(store_target)
    try:
        await store.write(_rows())
        snippets = [h for h in await store.search("Lisbon", user_id="alice") if h.call_id == "c2"]
        assert [s.content for s in snippets] == ["Marta and I fly to Lisbon on 14 March."]
        found = stated_values(snippets)
        assert found == ["14 March"]
        later = [h for v in found for h in await store.search(v, user_id="alice")]
    finally:
        await store.close()
    assert any("21 March" in h.content for h in later)  # the correction, by its old value
    assert supersede(snippets)[0].content == snippets[0].content  # unmarked without it
    (marked,) = supersede(snippets, later=later)
    assert marked.content == SUPERSEDED_MARK.format(new="21 March") + snippets[0].content


def test_only_a_later_text_supersedes_and_it_is_never_added():
    snippet = _hit("c2", 0, 200.0, "Marta and I fly to Lisbon on 14 March.")
    earlier = _hit("c1", 5, 150.0, "Actually, make that 21 March, not 14 March.")
    later = _hit("c3", 0, 300.0, "Actually, make that 21 March, not 14 March.")
    assert supersede([snippet], later=[earlier]) == [snippet]  # said before: corrects nothing
    (marked,) = supersede([snippet], later=[earlier, later])
    assert marked.content.startswith("[superseded: later corrected to 21 March]")
    unrelated = _hit("c3", 1, 300.0, "The hotel costs $40 a night.")
    assert supersede([snippet], later=[unrelated]) == [snippet]


def test_stated_values_are_each_value_once_best_snippet_first_names_left_out():
    snippets = [
        _hit("c2", 0, 1.0, "Marta flies on 14 March at 3pm, booking AB-1234."),
        _hit("c2", 1, 2.0, "Noted, 14 March, 2 tickets."),
    ]
    assert stated_values(snippets) == ["14 March", "3pm", "AB-1234"]
    assert stated_values(snippets, limit=5) == ["14 March", "3pm", "AB-1234", "2 tickets"]
    assert stated_values([_hit("c1", 0, 1.0, "Marta lives in Porto.")]) == []
