"""Recall reads at most ``MAX_HIT_CHARS`` of an archived message, around the first searched
word: the work after the search costs the same for a 30 KB tool result as for a spoken turn,
and the part read is a substring (the "already in view" checks still hold). Pure rules
(Hypothesis), and the step on a real SQLite store."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._recall.gather import MAX_HIT_CHARS, clip, clipped
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, SearchHit

_WORDS = st.lists(st.sampled_from(["amber", "basil", "cedar", "marquis", "lisbon", "x"]))


@given(_WORDS, st.lists(st.sampled_from(["marquis", "lisbon", "hotel"]), max_size=3))
def test_a_clip_is_a_substring_within_the_limit_around_the_first_searched_word(body, searched):
    text = " ".join(body * 40)
    out = clip(text, searched, 200)
    assert out in text and len(out) <= 200
    if len(text) <= 200:
        assert out == text  # short texts are read whole
    starts = [text.lower().find(w[:4]) for w in searched]
    first = min((i for i in starts if i >= 0), default=None)
    if first is not None and len(text) > 200:
        # the first searched word is in the part read (a word of at most 6 letters)
        lo = text.find(out)
        assert lo <= first and first + 6 <= lo + len(out) + 6


def test_long_hits_and_replies_are_clipped_short_ones_kept():
    long = "Booking for the Marquis hotel " + "amber " * 2_000
    hits = [
        SearchHit("c1", 0, 0, 1.0, "tool", long, "cleared", -1.0),
        SearchHit("c1", 2, 1, 2.0, "user", "the Marquis hotel", "summarized", -0.5),
    ]
    replies = {("c1", 0): ("assistant", "amber " * 2_000 + "Marquis")}
    out, read = clipped((hits, dict(replies)), ["marquis"])
    assert len(out[0].content) <= MAX_HIT_CHARS and "Marquis" in out[0].content
    assert out[1] is hits[1]  # short: the very same hit
    assert len(read[("c1", 0)][1]) <= MAX_HIT_CHARS and "Marquis" in read[("c1", 0)][1]


async def test_the_step_reads_a_bulky_archived_result_in_part(tmp_path):
    body = " ".join(f"amber{i}" for i in range(6_000))  # ~50 KB
    text = f"Booking reference QX7731 for the Marquis hotel in Lisbon: {body}"
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(
            [
                ArchivedMessage(
                    call_id="c1",
                    position=0,
                    role="tool",
                    content=text,
                    message_json=json.dumps({"role": "tool", "content": text}),
                    turn=0,
                    at=1_700_000_000,
                    user_id="alice",
                )
            ]
        )
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        (hits, _), how = await step.hits_for_turn("the Marquis hotel reference", wait_s=5.0)
        assert how == "on_time" and len(hits) == 1
        assert len(hits[0].content) <= MAX_HIT_CHARS and "QX7731" in hits[0].content
        assert hits[0].content in text
        found = await step.lookup("the Marquis hotel reference")
        assert found and "QX7731" in found[0]["text"]
    finally:
        await store.close()
