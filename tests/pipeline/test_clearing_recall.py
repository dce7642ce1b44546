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

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._compaction.clearing import PLACEHOLDER_PREFIX
from pipecat_summarizer.params import (
    ClearingParams,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
)
from pipecat_summarizer.store import open_store
from pipecat_summarizer.tools import register_recall_memory
from tests.support.order_tools import ASKED, order_desk, order_result, tool_results
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.recall_calls import FAST
from tests.support.settle import run_settling

LOOKED_UP = ("A17", "B23", "C31")


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
        await params.result_callback(order_result(params.arguments["order"], repeat=120))

    llm.register_function("lookup_order", lookup_order)
    register_recall_memory(llm, processor, context)
    schema = FunctionSchema(name="lookup_order", description=".", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[*context.tools.standard_tools, schema]))
    try:
        await run_settling(build(context, processor, llm), frames_to_send=turns(said, gap=3.0))
    finally:
        await processor.cleanup()
        await store.close()


async def test_recall_memory_returns_the_cleared_original_never_its_placeholder(
    openai_server, store_target
):
    openai_server.handler = order_desk
    await _one_call(openai_server, store_target, [*(f"Look up order {o}" for o in LOOKED_UP), "ok"])
    a17 = tool_results(openai_server, "call_A17")
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
    answer = tool_results(openai_server, "call_recall")[0]  # resent with later requests
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
    openai_server.handler = order_desk
    said = [*(f"Look up order {o}" for o in LOOKED_UP), "ok", "fine", ASKED, "thanks"]
    await _one_call(openai_server, store_target, said, cfg(tokens=1000, messages=16, keep=4))
    assert openai_server.summary_requests  # the cleared lookups were summarized
    answer = tool_results(openai_server, "call_recall")[0]  # resent with later requests
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
