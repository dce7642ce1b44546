"""After ``forget(user_id)`` during the call, recall stops quoting the forgotten text at once:
the follow-up request of the very tool round that forgot the caller no longer carries the
recalled block. A real pipeline (the companion after the LLM, a real tool handler calling
the store's ``forget``), a real SQLite store, the local OpenAI-protocol server."""

from __future__ import annotations

import pytest
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import RECALL_HEADER
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
FILLER = [
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Can I book a table for dinner tonight?",
    "Do you have a gluten free menu?",
    "How late is the pool open?",
    "Could you send towels up please?",
    "Is there a gym upstairs?",
]
FORGET = "What was the name of our hotel again? Then forget me, please."
CALL = {"id": "call_1", "type": "function", "function": {"name": "forget_me", "arguments": "{}"}}


async def test_recall_stops_quoting_a_forgotten_caller_at_once(openai_server, tmp_path):
    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- the caller asked about the hotel services")
        last = body["messages"][-1]
        if last["role"] == "user" and last["content"] == FORGET:
            return Reply(None, tool_calls=[CALL], finish_reason="tool_calls")
        return Reply("Done.")

    probe = SQLiteMemoryStore(tmp_path / "probe.db")
    try:
        await probe.forget("nobody")
        counted = probe.forget_generation("nobody") == 1
    finally:
        await probe.close()
    if not counted:
        pytest.skip("this store's forget() does not count forgets (forget_generation) yet")
    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    schema = FunctionSchema(name="forget_me", description="Forget.", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[schema]))
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        store=store,
        call_id="c1",
        user_id="u1",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=5.0),
    )
    llm = main_llm(openai_server.base_url)

    async def forget_me(params):
        await store.forget("u1")
        await params.result_callback({"status": "forgotten"})

    llm.register_function("forget_me", forget_me)
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline([pair.user(), processor, llm, processor.after_llm(), pair.assistant()])
    try:
        await run_settling(pipeline, frames_to_send=turns([HOTEL, *FILLER, FORGET], gap=0.25))
    finally:
        await summarizer.aclose()
        await store.close()
    asked = [b for b in openai_server.chat_requests if b["messages"][-1]["content"] == FORGET]
    follow_up = openai_server.chat_requests[-1]["messages"]
    assert follow_up[-1]["role"] == "tool"
    # the turn's request quoted the hotel (recall found it); after the forget, nothing does
    assert len(asked) == 1 and "Hotel Marquis" in str(asked[0]["messages"])
    assert not any(RECALL_HEADER in str(m.get("content")) for m in follow_up)
    assert "Hotel Marquis" not in str(follow_up)
