"""The fault matrix: each summarizer fault for a stretch of turns, then healthy.

Per fault kind (``tests/fuzz/matrix.py``), through a real pipeline against the fault server
(the response body's faults one after the other in one call):
the context stays intact (the fuzzer's invariants on every main-LLM request), one WARNING per
failure, exactly one ERROR per streak (failures in a row reach ``error_after_failures``),
recovery after (a summary applied once healthy), and the attempts during the outage within
what the backoff allows. Run with ``-s`` to see the table.
"""

from __future__ import annotations

import pytest

from tests.fuzz import harness
from tests.fuzz.fault_server import FAILING
from tests.fuzz.matrix import (
    ERROR_AFTER,
    MATRIX_FAULTS,
    OUTAGE_TURNS,
    Row,
    format_table,
    run_row,
    run_rows,
)

_rows: dict[str, Row] = {}


# The matrix measures real time (backoff windows, which failure ends a streak): played at a
# slower compression than the fuzzer's, so a loaded CI machine (four test workers on two
# cores) cannot move an attempt across a window. 0.1 held in 5 runs at -n 4 on two cores
# with a third process spinning a core: no row needed its replay.
MATRIX_SCALE = 0.1


def _check(row: Row) -> None:
    assert row.violations == [], row.violations[:5]
    for k, s in enumerate(row.streaks):
        where = f"{row.fault} streak {k}: {s}"
        if row.fault in FAILING:
            assert s.calls >= ERROR_AFTER, where  # the outage was long enough to escalate
            assert s.warnings == s.calls, where  # one WARNING per failure
            assert s.errors == 1, where  # exactly one ERROR per streak
            assert s.calls <= s.bound, where  # the backoff held
            assert s.calls <= OUTAGE_TURNS + 1, where  # no retries without a turn
            if row.fault != "refused":
                assert s.server_calls == s.calls, where  # every request the server saw failed
        else:  # slow but within the timeout: no failure at all
            assert (s.calls, s.warnings, s.errors) == (0, 0, 0), where
        # any other WARNING says something distinct, once per streak
        assert len(s.other_warnings) == len(set(s.other_warnings)), where
        assert s.recovered, where


# The faults of the response body (a 200 whose content is unusable) take one path: their rows
# are played in one call, a streak of each in turn (each after the previous one's recovery,
# so the single ERROR is also seen to re-arm). The transport's faults differ in timing (a
# timeout outlasts the switch back, a refused connection has no request): a call each, two
# streaks of the fault.
BODY = ("empty", "whitespace", "null", "garbage", "nochoices", "truncated")
CALLS = [(f,) for f in MATRIX_FAULTS if f not in BODY] + [BODY]


async def _play(faults: tuple[str, ...]) -> list[Row]:
    return await run_rows(faults) if len(faults) > 1 else [await run_row(faults[0])]


@pytest.mark.parametrize("faults", CALLS, ids=lambda faults: "+".join(faults))
async def test_fault_streaks(faults, monkeypatch):
    monkeypatch.setattr(harness, "SCALE", MATRIX_SCALE)
    rows = await _play(faults)
    try:
        for row in rows:
            _check(row)
    except AssertionError:
        # The windows are real time: on a runner loaded far beyond its cores a streak's
        # attempts can shift across a window. One replay of the call; a defect fails twice
        # (the fuzzer's invariants, checked on every request, are never retried).
        assert rows[0].violations == [], rows[0].violations[:5]
        rows = await _play(faults)
        for row in rows:
            _check(row)
    _rows.update((row.fault, row) for row in rows)


def test_print_matrix():
    """Prints the table for the closing note (``pytest -s``)."""
    if not _rows:
        pytest.skip("run together with test_fault_streaks")
    print("\n" + format_table([_rows[f] for f in MATRIX_FAULTS if f in _rows]))
