"""Attacks on ``budget.ExtraCost`` (b9e0f39, S14-L-1): a turn's extra searches (the stated
values' searches that find a correction made in a later call, the gathered words' second
search) start only when the lower median of the latest 3 durations of their kind fits what
is left; none kept from starting before 2 were measured; after 8 turns in a row without, one
is started again "(an archive that got faster: its pages cached, a purge)".

The hostile schedule: the first two values' searches slow (the archive busy at the call's
start: a cold cache, a purge, a VACUUM), every one after fast. The retry after 8 turns
measures one fast search; but the estimate is the lower median of [slow, slow, fast]: slow,
so the next 8 turns start none again, and only the second retry (turn 20) brings the median
down. Meanwhile every turn whose hits state a value corrected in an earlier call (and not in
the pinned facts) shows the old value unmarked: recall's only path to the mark
(``ArchiveSearch._later`` -> ``gather`` -> ``superseded.supersede``'s ``later``). S14-A-3.

Driven the way ``ArchiveSearch._extra_fits`` / ``_timed`` / ``_let_go`` drive it (fits, then
started + measured, or skipped), turn by turn: no clock, no store.
"""

from __future__ import annotations

from pipecat_summarizer._recall.budget import EXTRA_MIN_SAMPLES, EXTRA_RETRY, ExtraCost

LEFT_S = 0.010  # what is left of a 10 ms budget when the values' searches would start
SLOW_S = 0.040  # a search let go at the deadline, then ended (cancelled) later
FAST_S = 0.002


def _run(durations: list[float]) -> list[int]:
    """The turns (0-based) that started the search, each turn's search taking the given
    duration if started."""
    cost, started = ExtraCost(), []
    for turn, took in enumerate(durations):
        if cost.fits(LEFT_S):
            cost = cost.started().measured(took)
            started.append(turn)
        else:
            cost = cost.skipped()
    return started


def test_attack_extra_cost_always_slow_starts_only_the_retries():
    # held (the control): never expected in time, started only for the first measured
    # ones and every EXTRA_RETRY + 1 turns after
    started = _run([SLOW_S] * 30)
    assert started[:EXTRA_MIN_SAMPLES] == list(range(EXTRA_MIN_SAMPLES))
    gaps = {
        b - a
        for a, b in zip(started[EXTRA_MIN_SAMPLES - 1 :], started[EXTRA_MIN_SAMPLES:], strict=False)
    }
    assert gaps == {EXTRA_RETRY + 1}


def test_attack_extra_cost_always_fast_starts_every_turn():
    assert _run([FAST_S] * 30) == list(range(30))


# S14-A-3 (fixed): a retry's duration stands for all the samples
def test_attack_extra_cost_a_fast_retry_resumes_the_searches():
    # the archive slow for the first two searches only: once a retry measured it fast,
    # the next turn starts it again
    durations = [SLOW_S] * EXTRA_MIN_SAMPLES + [FAST_S] * 40
    started = _run(durations)
    first_retry = EXTRA_MIN_SAMPLES + EXTRA_RETRY
    missed = [t for t in range(EXTRA_MIN_SAMPLES, 30) if t not in started]
    print(f"\nstarted at turns {started[:6]}...; turns skipped with a fast archive: {len(missed)}")
    assert first_retry in started
    assert first_retry + 1 in started


def test_attack_extra_cost_a_retry_let_go_is_revised_in_every_sample():
    # a retry let go (its time so far counted at once), then ended slower: its own duration
    # stands for all the samples, not only the last copy of the bound
    cost = ExtraCost()
    for _ in range(EXTRA_MIN_SAMPLES):
        cost = cost.started().measured(SLOW_S)
    for _ in range(EXTRA_RETRY):
        cost = cost.skipped()
    bound = FAST_S / 2
    cost = cost.started().measured(bound)
    assert cost.samples == (bound,) * EXTRA_MIN_SAMPLES
    cost = cost.revised(bound, FAST_S)
    assert cost.samples == (FAST_S,) * EXTRA_MIN_SAMPLES
    assert cost.fits(FAST_S)
