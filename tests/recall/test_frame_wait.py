"""The frame's plan within recall's latency budget (pure): the step plans in the budget less
a margin for what it cannot see or stop (the queue hop, placing the block and pushing the
frame, a timer that fires late), and the search's wait leaves the measured reserve for the
work after it; the wait, the reserve and the margin never add up to more than the budget. The
reserves are measured on the turns before (``Reserves``): the wait keeps back only the work
after the search that the deadline cannot cut, not the selection, which stops at it."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.budget import MARGIN_S, Reserves, planned_budget, search_wait

budgets = st.floats(0.0, 30.0, allow_nan=False)
seconds = st.floats(-1.0, 30.0, allow_nan=False)


@settings(deadline=None, max_examples=300)
@given(budgets)
def test_the_plan_keeps_a_margin_of_a_fifth_at_most_two_milliseconds(budget):
    planned = planned_budget(budget)
    margin = budget - planned
    assert 0.0 <= planned <= budget
    assert margin <= min(budget / 5, MARGIN_S) + 1e-12
    assert math.isclose(margin, min(budget / 5, MARGIN_S), abs_tol=1e-12)


def test_the_default_budget_plans_eight_milliseconds():
    assert math.isclose(planned_budget(0.010), 0.008)
    assert math.isclose(planned_budget(1.0), 0.998)  # a generous budget loses two milliseconds
    assert math.isclose(planned_budget(0.005), 0.004)
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


moments = st.lists(st.floats(0.0, 0.05, allow_nan=False), min_size=4, max_size=4).map(sorted)


@settings(deadline=None, max_examples=300)
@given(moments, st.floats(0.0, 0.05, allow_nan=False))
def test_the_search_s_reserve_leaves_out_the_selection_which_the_deadline_cuts(times, longer):
    found, picking, chosen, end = times
    before = Reserves(0.002, 0.004, 0.001)
    after = before.measured(found, picking, chosen, end)
    # a selection that took ``longer`` (cut at the deadline anyway) keeps the same wait
    slower = before.measured(found, picking, chosen + longer, end + longer)
    assert math.isclose(slower.wait, after.wait, abs_tol=1e-12)
    assert slower.extra >= after.extra
    assert math.isclose(slower.select, after.select, abs_tol=1e-12)
    # the extra searches keep back all the work after the search: never less than the wait
    fresh = Reserves().measured(found, picking, chosen, end)
    assert fresh.extra >= fresh.wait - 1e-12
    assert math.isclose(fresh.wait, (picking - found) + (end - chosen), abs_tol=1e-12)
    assert math.isclose(fresh.extra, end - found, abs_tol=1e-12)


def test_a_slow_turn_is_kept_back_at_once_and_forgotten_slowly():
    slow = Reserves().measured(0.0, 0.003, 0.004, 0.006)  # 3 ms before, 2 ms after selecting
    assert math.isclose(slow.wait, 0.005) and math.isclose(slow.extra, 0.006)
    quick = slow.measured(0.0, 0.0, 0.0, 0.0)
    assert 0.0 < quick.wait < slow.wait and math.isclose(quick.wait, 0.8 * slow.wait)
