"""Many concurrent calls in one process through one shared, capped summarizer.

64 calls on a cap of 8 compete as 200 do (the cap is reached and held); the figures for 200
are ``benchmarks/many_calls.py``'s."""

from __future__ import annotations

from tests.support.many_calls_scenario import run_many_calls

CALLS, CAP = 64, 8


async def test_many_concurrent_calls_share_one_capped_summarizer():
    # memory per call is the benchmark's figure: tracing every allocation tripled this run
    figures, calls, _ = await run_many_calls(calls=CALLS, turns=6, cap=CAP, trace_memory=False)
    print(f"\n{figures.line()}")
    # every call summarized, every summary applied, none failed
    assert figures.summary_requests >= CALLS
    assert all(call.applied for call in calls)
    assert figures.applied == figures.summary_requests and figures.failed == 0
    # no cross-talk: each request and each context holds one call's tokens only
    assert not figures.cross_talk, figures.cross_talk[:5]
    # nothing lost: every turn verbatim or inside the call's own summary
    assert not figures.lost, figures.lost[:5]
    # the cap held at the server, and was reached (the calls did compete)
    assert 1 < figures.peak_in_flight <= CAP
    # one pool for all calls while they ran; nothing left open once the app closed it
    assert figures.connections_during <= CAP
    assert figures.connections_after_close == 0
    assert figures.resource_warnings == 0
