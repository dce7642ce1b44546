"""The recalled block counts toward ``max_request_tokens``: it shrinks to the room the
conversation leaves and gives way before the ceiling evicts conversation. A real pipeline
with a real SQLite store against the local OpenAI-protocol server, and the pure rule."""

from __future__ import annotations

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import RECALL_HEADER
from pipecat_summarizer._recall.step import MIN_RECALL_TOKENS, fits, recall_budget, search_wait
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import (
    CeilingParams,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    WriterParams,
)
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
CEILING = 500


def test_recall_budget_shrinks_to_the_room_then_gives_way():
    assert recall_budget(800, None) == 800  # no ceiling
    assert recall_budget(800, 300) == 300
    assert recall_budget(200, 300) == 200
    assert recall_budget(800, MIN_RECALL_TOKENS - 1) is None
    assert recall_budget(800, -50) is None
    assert fits(None) and fits(MIN_RECALL_TOKENS) and not fits(MIN_RECALL_TOKENS - 1)


async def test_a_request_with_recall_stays_under_the_ceiling(openai_server, tmp_path):
    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- the caller described rooms")
        return Reply("Sure thing.")

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        params=ContextSummarizerParams(ceiling=CeilingParams(max_request_tokens=CEILING)),
        store=store,
        call_id="c1",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=5.0),  # default block: 800 tokens
    )
    said = [
        f"Room {400 + i} at the Marquis hotel has a blue door, a balcony and a view "
        f"of the river; the balcony door sticks and the blue paint is fresh. " * 2
        for i in range(10)
    ]
    asks = ["Which Marquis room had the blue door and the sticking balcony?"] * 2
    try:
        await run_settling(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=turns([*said, *asks], gap=0.2),
        )
    finally:
        await summarizer.aclose()
        await store.close()
    counter = EstimateTokenCounter()
    sizes = [
        sum(counter.count_message(m) for m in b["messages"]) for b in openai_server.chat_requests
    ]
    assert max(sizes) <= CEILING, sizes
    recalled = [b for b in openai_server.chat_requests if RECALL_HEADER in str(b["messages"][-2:])]
    assert recalled  # recall still answered, within what the ceiling left


def test_the_search_waits_only_what_the_budget_leaves():
    # the budget counts from the frame's arrival: what ran before the search and what the
    # ranking and rendering will take come out of the wait
    assert search_wait(0.010, 0.0, 0.0) == 0.010
    assert abs(search_wait(0.010, 0.002, 0.001) - 0.007) < 1e-12
    assert search_wait(0.010, 0.012, 0.0) == 0.0  # already over: no wait at all
    assert search_wait(0.010, 0.0, 0.050) == 0.005  # the reserve takes half at most
    assert search_wait(5.0, -1.0, -1.0) == 5.0
