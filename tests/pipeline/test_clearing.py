"""Tool-result clearing through real pipelines: Pipecat's OpenAI service against the local
server, a real ``LLMContextAggregatorPair``, real tools, a real SQLite file and the real
PostgreSQL. Bulky results are cleared with no LLM call, every request stays paired, the
originals are archived and ``recall_memory`` brings one back; in-progress and excluded results
are never touched; clearing batched with a compaction is reported on its event."""

from __future__ import annotations

import json

import pytest
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


def _schema(name: str) -> FunctionSchema:
    return FunctionSchema(name=name, description=f"{name}.", properties={}, required=[])


async def _call_with_tools(server, processor, context) -> None:
    llm = main_llm(server.base_url)

    async def lookup_order(params):
        await params.result_callback(order_result(params.arguments["order"]))

    async def crm(params):
        await params.result_callback({"customer": "record " * 300})

    async def slow_check(params):  # an async tool still running when the call ends
        pass

    llm.register_function("lookup_order", lookup_order)
    llm.register_function("crm", crm)
    llm.register_function("slow_check", slow_check, cancel_on_interruption=False)
    register_recall_memory(llm, processor, context)
    tools = [_schema(n) for n in ("lookup_order", "crm", "slow_check")]
    context.set_tools(ToolsSchema(standard_tools=[*context.tools.standard_tools, *tools]))
    said = [
        "Look up order A17",
        "Look up order B23",
        "Open my customer record",
        "Start the background check",
        "Look up order C31",
        "Look up order D47",
        ASKED,
        "ok",
    ]
    await run_settling(build(context, processor, llm), frames_to_send=turns(said, gap=0.35))


def _assert_paired(request: dict) -> None:
    """Every tool result answers a call made before it, and every call has its result."""
    called: list[str] = []
    answered: set[str] = set()
    for m in request["messages"]:
        for call in m.get("tool_calls") or ():
            called.append(call["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in called, m["tool_call_id"]
            answered.add(m["tool_call_id"])
    assert set(called) <= answered


async def test_clearing_frees_tokens_without_an_llm_call_and_recall_brings_it_back(
    openai_server, store_target
):
    openai_server.handler = order_desk
    store = open_store(store_target)
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    clearing = ClearingParams(
        keep_latest=2, min_result_tokens=0, min_freed_tokens=200, exclude_tools=("crm",)
    )
    processor = ContextSummarizer(
        context=context,
        config=cfg(tokens=3200, messages=60, keep=4),
        params=ContextSummarizerParams(clearing=clearing),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        store=store,
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(enabled=False, tool_timeout_s=5.0),
    )
    events = []

    @processor.event_handler("on_tool_results_cleared")
    async def _cleared(_processor, event):
        events.append(event)

    try:
        await _call_with_tools(openai_server, processor, context)
        call_id = processor.call_id
        assert call_id is not None
        archived = await store.messages(call_id)
    finally:
        await processor.cleanup()
        await store.close()
    # the threshold tripped, clearing alone brought it under: no summary was asked for
    assert openai_server.summary_requests == []
    for request in openai_server.chat_requests:
        _assert_paired(request)  # the provider request stays valid
    a17 = tool_results(openai_server, "call_A17")
    assert "ZEBRA417" in a17[0] and a17[-1].startswith(PLACEHOLDER_PREFIX)
    assert "lookup_order" in a17[-1]
    # the excluded tool's result and the running async tool's message are never touched
    assert all("record record" in c for c in tool_results(openai_server, "call_crm"))
    slow = tool_results(openai_server, "call_slow")
    assert slow and all('"async_tool"' in c for c in slow)
    # the original is archived verbatim, and recall_memory brings it back
    cleared = [a for a in archived if a.removed_by == "cleared"]
    assert any("ZEBRA417" in a.content for a in cleared)
    original = next(a for a in cleared if "ZEBRA417" in a.content)
    assert json.loads(original.message_json)["tool_call_id"] == "call_A17"
    recalled = tool_results(openai_server, "call_recall")
    assert recalled and "ZEBRA417" in recalled[0]
    # what is in the context now is the placeholder, still paired with its call
    a17_now = [m for m in context.messages if m.get("tool_call_id") == "call_A17"]
    assert len(a17_now) == 1 and a17_now[0]["content"].startswith(PLACEHOLDER_PREFIX)
    # the clearing is reported on its own event, with the tokens freed measured after
    assert events and sum(e.tool_results_cleared for e in events) >= 1
    assert all(e.tokens_before > e.tokens_after for e in events)
    assert "lookup_order" in {t for e in events for t in e.tools}


async def test_clearing_batched_with_a_compaction_is_reported_on_its_event(openai_server, tmp_path):
    openai_server.handler = order_desk
    store = open_store(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=14, keep=10),
        params=ContextSummarizerParams(
            clearing=ClearingParams(keep_latest=1, min_result_tokens=0, min_freed_tokens=100)
        ),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        store=store,
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(enabled=False, tool_timeout_s=5.0),
    )
    events = []

    @processor.event_handler("on_context_compacted")
    async def _compacted(_, event):
        events.append(event)

    try:
        await _call_with_tools(openai_server, processor, context)
    finally:
        await processor.cleanup()
        await store.close()
    assert events and openai_server.summary_requests
    batched = [e for e in events if e.tool_results_cleared]
    assert batched, events
    event = batched[0]
    assert event.tokens_cleared > 0
    for request in openai_server.chat_requests:
        _assert_paired(request)


async def test_clearing_without_a_store_is_refused_unless_the_app_accepts_the_loss(
    openai_server,
):
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    try:
        with pytest.raises(ValueError, match=r"clearing.*without_store=True"):
            ContextSummarizer(
                context=LLMContext(),
                params=ContextSummarizerParams(clearing=ClearingParams()),
                summarizer=summarizer,
            )
        ContextSummarizer(
            context=LLMContext(),
            params=ContextSummarizerParams(clearing=ClearingParams(without_store=True)),
            summarizer=summarizer,
        )
    finally:
        await summarizer.aclose()


async def test_without_a_store_the_placeholder_says_the_text_is_gone(openai_server):
    openai_server.handler = order_desk
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    clearing = ClearingParams(keep_latest=1, min_result_tokens=0, without_store=True)
    processor = ContextSummarizer(
        context=context,
        config=cfg(tokens=2600, messages=60, keep=4),
        params=ContextSummarizerParams(clearing=clearing),
        summarizer=summarizer,
    )
    try:
        await _call_with_tools(openai_server, processor, context)
    finally:
        await summarizer.aclose()
    a17 = [m for m in context.messages if m.get("tool_call_id") == "call_A17"]
    assert a17[0]["content"].startswith(PLACEHOLDER_PREFIX)
    assert "no longer available" in a17[0]["content"]
    for request in openai_server.chat_requests:
        _assert_paired(request)
