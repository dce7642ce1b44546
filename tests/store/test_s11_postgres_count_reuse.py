"""A common word's count is reused longer the larger it is, as on SQLite (PostgreSQL).

Recall's search by caller counts each new word's rows in the caller's word index (up to
``KEEP_MATCHES + 1`` index rows); a count of ``DF_CACHE_MIN`` or more is kept and sent back
with the next searches instead of counted again. At a flat 60 s a call's next question a
minute on counted its common words again; SQLite reuses a count of ``n`` for
``60 * n / 200`` s (at most an hour). A count past ``KEEP_MATCHES`` stays 60 s: its edge
orders such words, and moves with each new match. Pure: the statement's arguments.
"""

from __future__ import annotations

import time

from pipecat_summarizer.store._postgres_search import (
    DF_TTL_MAX_S,
    DF_TTL_S,
    KEEP_MATCHES,
    caller_search_sql,
    fresh_for,
)


def test_the_counts_sent_with_a_search_are_those_still_fresh():
    now = time.monotonic()
    counts = {  # (count, edge, when, the caller's removals then)
        ("al", "hotel"): (1000, 5, now - 120, 2),  # reused for 300 s
        ("al", "train"): (KEEP_MATCHES + 1, 7, now - 120, 2),  # past KEEP_MATCHES: 60 s
        ("al", "rare"): (200, 9, now - 61, 2),  # 60 s
        ("al", "new"): (KEEP_MATCHES + 1, 8, now - 30, 1),
        ("bo", "room"): (3000, 3, now - 10, 0),  # another caller's
    }
    words = ["train", "hotel", "rare", "new", "room"]
    for function in (True, False):
        statement = caller_search_sql("english", words, "al", 10, counts, function)
        distinct, known, edges, removals = statement[1], statement[4], statement[5], statement[6]
        assert distinct == ["hotel", "new", "rare", "room", "train"]
        assert known == [1000, KEEP_MATCHES + 1, None, None, None]
        assert edges == [5, 8, None, None, None]
        assert removals == [2, 1, None, None, None]  # the statement compares them


def test_how_long_a_count_is_reused():
    assert fresh_for(0) == 0
    assert fresh_for(200) == DF_TTL_S
    assert fresh_for(1000) == 5 * DF_TTL_S
    assert fresh_for(KEEP_MATCHES) == min(DF_TTL_S * KEEP_MATCHES / 200, DF_TTL_MAX_S)
    assert fresh_for(KEEP_MATCHES + 1) == DF_TTL_S
