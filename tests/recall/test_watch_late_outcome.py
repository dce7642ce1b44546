"""The ``watch_late`` turn outcome (S14-R-1): hits found, the block ready, but the turn's
forget watch (the caller's tombstone read) had not answered by the frame's deadline, so
nothing was placed; told apart from ``nothing_new`` (searched, nothing worth placing)."""

from __future__ import annotations

from pipecat_summarizer._recall.hooks import COUNTERS, TURN_OUTCOMES, turn_outcome


def _delta(**moved: int) -> dict[str, int]:
    return {k: moved.get(k, 0) for k in COUNTERS}


def test_a_late_watch_reads_watch_late():
    assert "watch_late" in TURN_OUTCOMES
    assert turn_outcome(_delta(turns=1, watch_late=1), placed=False) == "watch_late"


def test_without_a_late_watch_nothing_placed_reads_nothing_new():
    assert turn_outcome(_delta(turns=1), placed=False) == "nothing_new"


def test_an_error_or_a_missed_budget_is_named_first():
    assert turn_outcome(_delta(turns=1, errors=1, watch_late=1), placed=False) == "error"
    assert turn_outcome(_delta(turns=1, missed=1, watch_late=1), placed=False) == "missed_budget"
