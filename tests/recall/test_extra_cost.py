"""The estimate by which a turn starts an extra search (the gathered words' second search, the
stated values' searches) only when it is expected to answer in time (``budget.ExtraCost``):
the lower median of the latest durations, none kept from starting before two were measured,
a search let go counted at once and revised when it ends, and one tried again after
``EXTRA_RETRY`` turns in a row without. Pure: no event loop, no clock. The pipelines are in
tests/pipeline/test_extra_searches_in_time.py."""

from __future__ import annotations

from pipecat_summarizer._recall.budget import (
    EXTRA_MIN_SAMPLES,
    EXTRA_RETRY,
    EXTRA_SAMPLES,
    ExtraCost,
)


def _measured(*seconds: float) -> ExtraCost:
    cost = ExtraCost()
    for s in seconds:
        cost = cost.started().measured(s)
    return cost


def test_nothing_measured_starts_and_one_slow_answer_never_stops_one():
    assert ExtraCost().expected is None and ExtraCost().fits(0.0)
    # the machine busy for a moment: one slow answer alone keeps none from starting
    assert EXTRA_MIN_SAMPLES == 2
    assert _measured(0.050).fits(0.002)


def test_the_estimate_is_the_lower_median_of_the_latest():
    assert _measured(0.001, 0.009).expected == 0.001  # of two, the shorter
    assert _measured(0.009, 0.001, 0.004).expected == 0.004
    # only the latest EXTRA_SAMPLES count: three slow ones push out the fast ones
    slow = _measured(0.001, 0.001, 0.001, *([0.008] * EXTRA_SAMPLES))
    assert len(slow.samples) == EXTRA_SAMPLES and slow.expected == 0.008
    assert not slow.fits(0.003) and slow.fits(0.008)
    # a search that answers in time in most turns is still started
    assert _measured(0.001, 0.020, 0.002).fits(0.003)


def test_a_search_let_go_counts_at_once_then_its_own_time():
    cost = _measured(0.009).started().measured(0.003)  # let go after 3 ms
    assert cost.expected == 0.003 and cost.fits(0.004)
    ended = cost.revised(0.003, 0.012)  # it ended 12 ms after it started
    assert ended.samples == (0.009, 0.012) and not ended.fits(0.004)
    # pushed out meanwhile: nothing to revise
    assert cost.revised(0.5, 0.6) == cost
    # never revised below what it had run when let go
    assert cost.revised(0.003, 0.001).samples == (0.009, 0.003)


def test_a_search_not_started_is_tried_again_after_enough_turns():
    cost = _measured(0.010, 0.010)
    for _ in range(EXTRA_RETRY):
        assert not cost.fits(0.002)
        cost = cost.skipped()
    assert cost.fits(0.002)  # tried again, and measured
    cost = cost.started()
    assert cost.passed == 0 and not cost.fits(0.002)
    assert cost.started().measured(0.001).measured(0.001).fits(0.002)  # it got faster
