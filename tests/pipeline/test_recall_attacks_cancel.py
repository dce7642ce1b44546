"""Attack on recall's turn being cut: a ``CancelFrame`` (the caller hung up, the transport
dropped) while the turn waits for a slow archive. The search the turn started must end with
the call: no task left running, no exception nobody reads. A real pipeline (a real
``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's OpenAI service against the
local server) on a SQLite file and the real PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from pipecat.frames.frames import CancelFrame
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer.params import RecallParams
from tests.support.early_search import searches_running, seed_trips, watched_store
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, main_llm, user_turn
from tests.support.recall_calls import travel_desk


async def _end_searches() -> None:
    """Cancel the search tasks still running (after they were counted)."""
    me = asyncio.current_task()
    running = [
        t
        for t in asyncio.all_tasks()
        if t is not me
        and not t.done()
        and "search" in getattr(t.get_coro(), "__qualname__", "").lower()
    ]
    for t in running:
        t.cancel()
    await asyncio.gather(*running, return_exceptions=True)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("how", ["slow", "failing"])
async def test_a_call_cancelled_while_recall_waits_leaves_no_search_behind(
    openai_server, store_target, logs, caplog, how
):
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(store_target)
    store.delay_s = 5.0 if how == "slow" else 0.6
    store.fail = how == "failing"
    recall = RecallParams(latency_budget_s=2.0)  # the turn is still waiting at the cancel
    context, processor, summarizer = travel_desk(openai_server, store, recall, call_id="now")
    try:
        await seed_trips(store)
        with caplog.at_level(logging.WARNING):
            try:
                await run_test(
                    build(context, processor, main_llm(openai_server.base_url)),
                    frames_to_send=[
                        user_turn("Which hotel did I book with you last time?"),
                        SleepFrame(sleep=0.3),
                        CancelFrame(),
                    ],
                    send_end_frame=False,
                )
            finally:
                await summarizer.aclose()
            await asyncio.sleep(0.8)  # a failing search has failed by now
            left = searches_running()
            await _end_searches()  # hygiene: nothing of this call runs into the next test
            gc.collect()  # an exception nobody read is reported when its task is collected
    finally:
        await store.close()
    assert store.searches  # the turn's search did start
    assert left == []
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r["message"] for r in logs if r["level"].no >= 40]
