"""A cleared tool result comes back through ``recall_memory`` as its original, never as its
placeholder: the placeholder is our text (it says the result was cleared), not what the tool
answered. Two calls of one caller through real pipelines (Pipecat's OpenAI service against the
local server, real aggregators, real tools) on SQLite and the real PostgreSQL: the first clears a
bulky lookup and ends with the lookup's call and placeholder in view (archived at its end); the
second asks for the detail and the main LLM calls ``recall_memory``."""

from __future__ import annotations

import json

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._compaction.clearing import PLACEHOLDER_PREFIX
from pipecat_summarizer.params import (
    ClearingParams,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    WriterParams,
)
from pipecat_summarizer.store import open_store
from pipecat_summarizer.tools import RECALL_MEMORY, register_recall_memory
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
TRACKING = {"A17": "ZEBRA417", "B23": "OTTER523", "C31": "HERON631"}
ASKED = "What was the tracking code of order A17?"


def _call(call_id: str, name: str, arguments: dict) -> Reply:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return Reply(tool_calls=[{"id": call_id, "type": "function", "function": function}])


def _handler(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- orders were looked up")
    last = body["messages"][-1]
    text = last.get("content") if last.get("role") == "user" else None
    if text == ASKED:
        return _call("call_recall", RECALL_MEMORY, {"query": "order A17 tracking code"})
    if isinstance(text, str) and text.startswith("Look up order "):
        order = text.rsplit(" ", 1)[1]
        return _call(f"call_{order}", "lookup_order", {"order": order})
    return Reply("Here it is." if last.get("role") == "tool" else "Sure thing.")


async def _one_call(server, target: str, said: list[str], config=None) -> None:
    """One call of the caller ``ann``: bulky lookups are cleared (the latest one kept)."""
    store = open_store(target)
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=config or cfg(tokens=1500, messages=60, keep=4),
        params=ContextSummarizerParams(
            clearing=ClearingParams(keep_latest=1, min_result_tokens=0, min_freed_tokens=100)
        ),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        user_id="ann",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(enabled=False, tool_timeout_s=5.0),
    )
    llm = main_llm(server.base_url)

    async def lookup_order(params):
        order = params.arguments["order"]
        history = "scanned at depot " * 120
        await params.result_callback({"order": order, "tracking": TRACKING[order], "h": history})

    llm.register_function("lookup_order", lookup_order)
    register_recall_memory(llm, processor, context)
    schema = FunctionSchema(name="lookup_order", description=".", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[*context.tools.standard_tools, schema]))
    try:
        await run_test(build(context, processor, llm), frames_to_send=turns(said, gap=0.35))
    finally:
        await processor.cleanup()
        await store.close()


def _tool_results(server, call_id: str) -> list[str]:
    """The tool's results as requests carried them (not Pipecat's placeholder of a call still
    running, which a turn asked meanwhile carries)."""
    return [
        m["content"]
        for b in server.chat_requests
        for m in b["messages"]
        if m["role"] == "tool" and m.get("tool_call_id") == call_id
        if m["content"] != "IN_PROGRESS"
    ]


async def test_recall_memory_returns_the_cleared_original_never_its_placeholder(
    openai_server, store_target
):
    openai_server.handler = _handler
    await _one_call(openai_server, store_target, [*(f"Look up order {o}" for o in TRACKING), "ok"])
    a17 = _tool_results(openai_server, "call_A17")
    assert a17[-1].startswith(PLACEHOLDER_PREFIX)  # it was cleared, and in view at the end
    store = open_store(store_target)
    try:
        (call,) = await store.calls("ann", limit=1)
        archived = await store.messages(call.call_id)
    finally:
        await store.close()
    cleared = [a for a in archived if a.removed_by == "cleared"]
    assert any("ZEBRA417" in a.content for a in cleared)  # the original, archived verbatim
    openai_server.requests.clear()

    await _one_call(openai_server, store_target, [ASKED, "thanks"])
    answer = _tool_results(openai_server, "call_recall")[0]  # resent with later requests
    found = json.loads(answer)["found"]
    assert found, answer
    assert "ZEBRA417" in answer  # the original comes back
    assert PLACEHOLDER_PREFIX not in answer  # our placeholder never passes for a result
    assert "was cleared from the context" not in answer


async def test_within_the_call_a_summarized_placeholder_never_comes_back(
    openai_server, store_target
):
    """The lookups are cleared first (the token threshold), then their calls and placeholders
    are summarized (the message threshold) in the same call; asked later in that call,
    recall_memory returns the original, never the placeholder, and no archived row holds the
    placeholder's text."""
    openai_server.handler = _handler
    said = [*(f"Look up order {o}" for o in TRACKING), "ok", "fine", ASKED, "thanks"]
    await _one_call(openai_server, store_target, said, cfg(tokens=1000, messages=16, keep=4))
    assert openai_server.summary_requests  # the cleared lookups were summarized
    answer = _tool_results(openai_server, "call_recall")[0]  # resent with later requests
    assert "ZEBRA417" in answer and PLACEHOLDER_PREFIX not in answer, answer
    store = open_store(store_target)
    try:
        (call,) = await store.calls("ann", limit=1)
        archived = await store.messages(call.call_id)
    finally:
        await store.close()
    a17 = [a for a in archived if "call_A17" in a.tool_call_ids and a.role == "tool"]
    assert {a.removed_by for a in a17} == {"cleared", "summarized"}, a17  # cleared, then summarized
    assert [a.content for a in a17 if a.removed_by == "summarized"] == [""]  # ours: unsearchable
    assert not any(a.content.startswith(PLACEHOLDER_PREFIX) for a in archived)
