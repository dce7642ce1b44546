"""The cost gate of the turn's ranking by meaning, as a pure rule (S16-Q-1).

``ExtraCost(every=RANK_RETRY)`` decides, from what the rankings that embedded their query
took lately, whether the next turn starts one: it must answer within the ranking's share of
the wait. Simulated turn by turn: a ranking that never fits is started for the first
:data:`EXTRA_MIN_SAMPLES` turns and then only once every ``RANK_RETRY + 1`` turns; one that
fits is started every turn; a machine that gets faster is back in by the next retry.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._recall.budget import (
    EXTRA_MIN_SAMPLES,
    EXTRA_RETRY,
    RANK_RETRY,
    ExtraCost,
)

SHARE_S = 0.0075  # RANK_SHARE x the real 10 ms budget


def _turns(costs: list[float], share_s: float = SHARE_S) -> list[bool]:
    """Which of the turns started a ranking, when the one a turn starts takes ``costs[i]``
    (each measured before the next turn, as a ranking ends in far less than a turn)."""
    cost = ExtraCost(every=RANK_RETRY)
    started = []
    for took in costs:
        if cost.fits(share_s):
            cost = cost.started().measured(took)
            started.append(True)
        else:
            cost = cost.skipped()
            started.append(False)
    return started


def test_the_rankings_retry_is_rarer_than_the_extra_searches():
    assert RANK_RETRY > EXTRA_RETRY
    assert ExtraCost().every == EXTRA_RETRY  # the extra searches' gate is unchanged


@given(
    turns=st.integers(min_value=0, max_value=200),
    took=st.floats(min_value=SHARE_S * 1.01, max_value=1.0),
)
def test_a_ranking_that_never_fits_starts_only_to_learn_and_to_retry(turns, took):
    started = _turns([took] * turns)
    learning = min(turns, EXTRA_MIN_SAMPLES)
    retries = max(0, turns - EXTRA_MIN_SAMPLES) // (RANK_RETRY + 1)
    assert sum(started) == learning + retries
    # the retries are spaced: RANK_RETRY turns without one between two
    at = [i for i, s in enumerate(started) if s][EXTRA_MIN_SAMPLES:]
    assert all(b - a == RANK_RETRY + 1 for a, b in zip(at, at[1:], strict=False))


@given(costs=st.lists(st.floats(min_value=0.0, max_value=SHARE_S), max_size=100))
def test_a_ranking_that_fits_starts_every_turn(costs):
    assert all(_turns(costs))


@given(
    slow=st.integers(min_value=EXTRA_MIN_SAMPLES, max_value=80),
    took=st.floats(min_value=SHARE_S * 1.01, max_value=1.0),
    fast=st.floats(min_value=0.0, max_value=SHARE_S),
)
def test_a_faster_machine_gets_back_in_by_the_next_retry(slow, took, fast):
    # slow turns, then the machine (or the model) is fast: the first retry measures it,
    # and every turn after it starts a ranking
    started = _turns([took] * slow + [fast] * (RANK_RETRY + 1 + 20))
    after = started[slow:]
    first = after.index(True)
    assert first <= RANK_RETRY
    assert all(after[first:])


def test_a_one_second_budget_ranks_every_turn():
    # a MiniLM query on a loaded machine (tens of ms) always fits 0.75 x 1 s
    assert all(_turns([0.06, 0.2, 0.015] * 30, share_s=0.75))
