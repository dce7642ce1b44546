"""The ``recall_memory`` tool: the main LLM searches the archive with its own words, through a
real pipeline (Pipecat's OpenAI service against the local server), and the Flows form."""

from __future__ import annotations

import json

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.recall import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.recorder import MemoryOptions
from pipecat_summarizer.tools import (
    RECALL_MEMORY,
    recall_memory_flows_function,
    recall_memory_result,
    register_recall_memory,
    register_remember_fact,
)
from tests.openai_server import Reply, is_summary_request
from tests.pipeline_utils import build, cfg, main_llm, turns
from tests.test_recall import FAST, FILLER, HOTEL, _summaries


def _tool_call(query: str) -> Reply:
    return Reply(
        tool_calls=[
            {
                "id": "call_r1",
                "type": "function",
                "function": {"name": RECALL_MEMORY, "arguments": json.dumps({"query": query})},
            }
        ]
    )


def _processor(server, store, context, recall=None):
    return ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        call_id="call-1",
        memory=MemoryOptions(writer=FAST),
        recall=recall or RecallParams(enabled=False, tool_timeout_s=5.0),
    )


async def test_recall_memory_tool_through_a_real_pipeline(openai_server, tmp_path):
    asked = "Remind me where we are staying?"
    calls = iter([_tool_call("hotel Lisbon")])

    def handler(body):
        if is_summary_request(body):
            return _summaries(body)
        last = body["messages"][-1]
        if last.get("role") == "user" and last.get("content") == asked:
            return next(calls, Reply("Noted."))
        return Reply("Sure thing.")

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = _processor(openai_server, store, context)
    llm = main_llm(openai_server.base_url)
    register_remember_fact(llm, processor, context)
    schema = register_recall_memory(llm, processor, context)  # the one line
    assert schema.name == RECALL_MEMORY
    try:
        await run_test(
            build(context, processor, llm),
            frames_to_send=[*turns([HOTEL, *FILLER, asked], gap=0.25), *turns(["ok"], gap=0.3)],
        )
    finally:
        await store.close()
    # both tools offered, side by side
    names = {t["function"]["name"] for t in openai_server.chat_requests[0]["tools"]}
    assert {RECALL_MEMORY, "remember_fact"} <= names
    # the follow-up request carries the tool result with the detail, as a tool message
    results = [
        m
        for b in openai_server.chat_requests
        for m in b["messages"]
        if m["role"] == "tool" and m.get("tool_call_id") == "call_r1"
    ]
    assert results
    payload = json.loads(results[0]["content"])
    assert any("Hotel Marquis" in f["text"] for f in payload["found"])
    assert payload["found"][0]["speaker"] == "caller"
    # automatic recall was off: no recalled block anywhere
    assert not any(
        "Recalled from earlier" in str(m.get("content"))
        for b in openai_server.chat_requests
        for m in b["messages"]
    )


async def test_recall_memory_errors_are_answers_not_crashes(tmp_path):
    context = LLMContext()
    no_recall = ContextSummarizer(
        context=context, summarizer=OpenAISummarizer(base_url="http://127.0.0.1:9", model="m")
    )
    assert "not configured" in (await recall_memory_result(no_recall, {"query": "x"}))["error"]

    class Down(SQLiteMemoryStore):
        async def search(self, query, **kwargs):
            raise ConnectionError("database is down")

    store = Down()
    processor = ContextSummarizer(
        context=context,
        summarizer=OpenAISummarizer(base_url="http://127.0.0.1:9", model="m"),
        store=store,
        recall=RecallParams(enabled=False),
    )
    assert (await recall_memory_result(processor, {"query": 3}))["error"] == (
        "query must be a non-empty string"
    )
    assert "unavailable" in (await recall_memory_result(processor, {"query": "hotel"}))["error"]
    await store.close()


async def test_recall_memory_for_flows_has_the_flows_handler_shape(openai_server, tmp_path):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = _processor(openai_server, store, context)
    try:
        await run_test(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=[*turns([HOTEL, *FILLER], gap=0.2)],
        )
        fn = recall_memory_flows_function(processor)
        # FlowsFunctionSchema(name, description, properties, required, handler)
        assert set(fn) == {"name", "description", "properties", "required", "handler"}
        assert fn["name"] == RECALL_MEMORY and fn["required"] == ["query"]
        result, next_node = await fn["handler"]({"query": "hotel Lisbon"}, None)
        assert next_node is None
        assert any("Hotel Marquis" in f["text"] for f in result["found"])
    finally:
        await store.close()
