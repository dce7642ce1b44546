"""The frame's plan within recall's latency budget (pure): the step plans in the budget less
a margin for what it cannot see or stop (the queue hop, placing the block and pushing the
frame, a timer that fires late), and the search's wait leaves the measured reserve for the
work after it; the wait, the reserve and the margin never add up to more than the budget."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.budget import MARGIN_S, planned_budget, search_wait

budgets = st.floats(0.0, 30.0, allow_nan=False)
seconds = st.floats(-1.0, 30.0, allow_nan=False)


@settings(deadline=None, max_examples=300)
@given(budgets)
def test_the_plan_keeps_a_margin_of_a_tenth_at_most_a_millisecond(budget):
    planned = planned_budget(budget)
    margin = budget - planned
    assert 0.0 <= planned <= budget
    assert margin <= min(budget / 10, MARGIN_S) + 1e-12
    assert math.isclose(margin, min(budget / 10, MARGIN_S), abs_tol=1e-12)


def test_the_default_budget_plans_nine_milliseconds():
    assert math.isclose(planned_budget(0.010), 0.009)
    assert math.isclose(planned_budget(1.0), 0.999)  # a generous budget loses a millisecond
    assert math.isclose(planned_budget(0.005), 0.0045)
    assert planned_budget(0.0) == 0.0


@settings(deadline=None, max_examples=300)
@given(budgets, seconds, seconds)
def test_the_wait_fits_in_the_plan_with_the_work_before_and_after_it(budget, elapsed, after):
    planned = planned_budget(budget)
    wait = search_wait(planned, elapsed, after)
    assert 0.0 <= wait <= planned
    # the work before the search and the reserve after it come out of the plan ...
    assert max(0.0, elapsed) + wait + min(max(0.0, after), planned / 2) <= planned + 1e-9 or (
        wait == 0.0
    )
    # ... and the search always keeps half the plan when nothing ran before it
    if elapsed <= 0:
        assert wait >= planned / 2 - 1e-12
