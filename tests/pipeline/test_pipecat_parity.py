"""Pipecat parity through real pipelines with the real OpenAILLMService.

- The companion processor after the main LLM (``summarizer.after_llm()``) holds the ceiling on
  the follow-up request after a tool call, which Pipecat's assistant aggregator sends upstream
  straight to the LLM, and routes ``LLMSummarizeContextFrame`` queued by a function handler to
  our summarizer instead of Pipecat's built-in.
- The ceiling counts the service's ``system_instruction`` (with Pipecat's async-tool
  instructions) and the tool schemas, not only the messages.
- A manual-only mode; ``target_context_tokens`` sent as given under the cap.

Each pipeline test has a control run without the fix that shows the scenario really breaks.
"""

from __future__ import annotations

import json

import pytest
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import LLMSummarizeContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.async_tool_messages import ASYNC_TOOL_INSTRUCTIONS
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.tests.utils import run_test

from pipecat_summarizer import (
    ContextSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
    OpenAISummarizer,
    SummarizerOptions,
)
from pipecat_summarizer._compaction.ceiling import request_overhead
from pipecat_summarizer._compaction.trigger import summary_budget
from pipecat_summarizer._text.tokens import EstimateTokenCounter, count_text
from pipecat_summarizer.guard import LLMRequestGuard
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import cfg, main_llm, texts_of, turns
from tests.support.settle import Gap, run_settling

C = EstimateTokenCounter()
BUILTIN_MARK = "Conversation history:"  # Pipecat's built-in summary request transcript


def request_tokens(body: dict) -> int:
    """What a request to the main LLM carries, counted like the processor counts it."""
    tokens = sum(C.count_message(m) for m in body["messages"])
    if body.get("tools"):
        tokens += count_text(C, json.dumps(body["tools"], ensure_ascii=False))
    return tokens


def builtin_requests(server) -> list[dict]:
    return [
        b
        for b in server.requests
        if any(BUILTIN_MARK in str(m.get("content")) for m in b.get("messages", []))
    ]


def tool_call(name: str, n: int, arguments: dict | None = None) -> Reply:
    return Reply(
        tool_calls=[
            {
                "id": f"call_{name}_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments or {})},
            }
        ]
    )


def schema(name: str) -> FunctionSchema:
    return FunctionSchema(name=name, description=f"The {name} tool.", properties={}, required=[])


def pipeline(context, summarizer, llm, *, guard: bool = True) -> Pipeline:
    pair = LLMContextAggregatorPair(context)
    after = [summarizer.after_llm()] if guard else []
    return Pipeline([pair.user(), summarizer, llm, *after, pair.assistant()])


# -- A(1): the ceiling holds on tool-call follow-ups -----------------------------------------


async def _tool_heavy_call(server, *, guard: bool, ceiling: int = 2000, n_turns: int = 12):
    """A call where every turn runs a tool with a ~750-token result; the summarizer is down."""
    count = {"calls": 0}

    def handler(body):
        if is_summary_request(body):
            return Reply(status=500)  # the summarizer is down for the whole call
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply("Here is what I found.")
        count["calls"] += 1
        return tool_call("lookup", count["calls"])

    server.handler = handler
    llm = main_llm(server.base_url, system_instruction="You are a records assistant. " * 8)

    async def lookup(params):
        await params.result_callback({"record": "field value " * 250})  # ~750 tokens

    llm.register_function("lookup", lookup)
    context = LLMContext()
    context.set_tools(ToolsSchema(standard_tools=[schema("lookup")]))
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        options=SummarizerOptions(max_request_tokens=ceiling, retry_backoff_s=0.5),
    )
    said = [f"look up record {k} " + "with some detail " * 20 for k in range(n_turns)]
    await run_settling(
        pipeline(context, summarizer, llm, guard=guard),
        frames_to_send=[*turns(said, gap=0.35), Gap(sleep=0.3)],
    )
    return summarizer, context, said


async def test_tool_follow_ups_stay_under_the_ceiling_with_the_guard(openai_server):
    ceiling = 2000
    summarizer, context, said = await _tool_heavy_call(openai_server, guard=True, ceiling=ceiling)
    chat = openai_server.chat_requests
    follow_ups = [b for b in chat if b["messages"][-1]["role"] == "tool"]
    assert len(follow_ups) == len(said)  # every tool call got its follow-up
    assert len(openai_server.summary_requests) >= 1  # the summarizer was tried, and failed
    over = [request_tokens(b) for b in chat if request_tokens(b) > ceiling]
    assert over == []
    # nothing lost: every turn is in the context or waits for a summary
    everything = texts_of(context.messages) + texts_of(summarizer.pending_messages)
    assert all(text in everything for text in said)


async def test_without_the_guard_tool_follow_ups_hold_the_ceiling_too(openai_server):
    """The processor also checks as the LLM builds each request (it wraps the shared
    context's ``get_messages(llm_specific_filter=...)``), so follow-ups it never sees hold
    the ceiling without the guard too. (Before that hook this was the control: they went
    over.)"""
    ceiling = 2000
    await _tool_heavy_call(openai_server, guard=False, ceiling=ceiling)
    follow_ups = [b for b in openai_server.chat_requests if b["messages"][-1]["role"] == "tool"]
    assert follow_ups
    assert all(request_tokens(b) <= ceiling for b in follow_ups)


# -- A(2): manual summaries queued by a function handler -----------------------------------


async def _manual_from_handler(server, *, guard: bool):
    """A function handler queues LLMSummarizeContextFrame, as Pipecat's example does."""
    count = {"calls": 0}

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- caller asked to wrap up")
        if any(BUILTIN_MARK in str(m.get("content")) for m in body["messages"]):
            return Reply("built-in summary on the main LLM")
        last = body["messages"][-1]
        if last["role"] == "user" and "wrap up" in str(last["content"]):
            count["calls"] += 1
            return tool_call("summarize_conversation", count["calls"])
        return Reply("Sure thing.")

    server.handler = handler
    llm = main_llm(server.base_url)

    async def summarize_conversation(params):
        await params.llm.queue_frame(LLMSummarizeContextFrame())
        await params.result_callback({"status": "summarizing"})

    llm.register_function("summarize_conversation", summarize_conversation)
    context = LLMContext(messages=[{"role": "system", "content": "You are helpful."}])
    context.set_tools(ToolsSchema(standard_tools=[schema("summarize_conversation")]))
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=50, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
    )
    applied = []

    @summarizer.event_handler("on_context_compacted")
    async def _applied(_, event):
        applied.append(event)

    frames = [
        *turns([f"user message number {i}" for i in range(6)], gap=2.0),
        *turns(["please wrap up our conversation"], gap=5.0),
        *turns(["thanks"], gap=2.0),
    ]
    down, _ = await run_settling(
        pipeline(context, summarizer, llm, guard=guard), frames_to_send=frames
    )
    return summarizer, context, applied, down


async def test_manual_frame_from_a_function_handler_runs_on_our_summarizer(openai_server):
    summarizer, context, applied, down = await _manual_from_handler(openai_server, guard=True)
    assert [e.reason for e in applied] == ["manual"]
    assert len(openai_server.summary_requests) == 1
    assert builtin_requests(openai_server) == []  # the main LLM got no summary request
    assert not any(isinstance(f, LLMSummarizeContextFrame) for f in down)
    assert "Conversation summary:" in texts_of(context.messages)
    assert context.messages[0]["content"] == "You are helpful."


async def test_control_without_the_guard_the_builtin_summarizes_on_the_main_llm(openai_server):
    _, _, applied, _ = await _manual_from_handler(openai_server, guard=False)
    assert applied == []
    assert builtin_requests(openai_server)  # Pipecat's built-in ran it on the main LLM


async def test_the_guard_rejects_anything_but_a_summarizer():
    with pytest.raises(TypeError, match="ContextSummarizer"):
        LLMRequestGuard(object())  # type: ignore[arg-type]


# -- B: the ceiling counts system_instruction and tool schemas -------------------------------


async def _instructed_call(server, *, attach: str, ceiling: int = 900):
    """system_instruction ~300 tokens, an async function (Pipecat appends its instructions),
    two tool schemas; turns of ~110 tokens; the summarizer is down."""
    server.handler = lambda body: (
        Reply(status=500) if is_summary_request(body) else Reply("Sure thing.")
    )
    llm = main_llm(server.base_url, system_instruction="Follow the house rules. " * 50)

    async def slow_lookup(params):
        await params.result_callback({"ok": True})

    llm.register_function("slow_lookup", slow_lookup, cancel_on_interruption=False)  # async
    context = LLMContext()
    tools = [schema("slow_lookup"), schema("book_table")]
    context.set_tools(ToolsSchema(standard_tools=tools))
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        options=SummarizerOptions(max_request_tokens=ceiling, retry_backoff_s=0.5),
        llm=llm if attach == "constructor" else None,
    )
    said = [f"turn {k} " + "some words of chat " * 20 for k in range(14)]
    await run_settling(
        pipeline(context, summarizer, llm, guard=attach == "guard"),
        frames_to_send=[*turns(said, gap=0.1), Gap(sleep=0.2)],
    )
    return summarizer


@pytest.mark.parametrize("attach", ["guard", "constructor"])
async def test_ceiling_counts_system_instruction_and_tool_schemas(openai_server, attach):
    ceiling = 900
    summarizer = await _instructed_call(openai_server, attach=attach, ceiling=ceiling)
    chat = openai_server.chat_requests
    assert ASYNC_TOOL_INSTRUCTIONS in chat[-1]["messages"][0]["content"]
    assert len(chat[-1]["tools"]) >= 2
    assert summarizer.request_overhead_tokens() > 300
    assert max(request_tokens(b) for b in chat) <= ceiling


async def test_control_counting_only_messages_goes_over_the_ceiling(openai_server):
    ceiling = 900
    await _instructed_call(openai_server, attach="none", ceiling=ceiling)
    assert max(request_tokens(b) for b in openai_server.chat_requests) > ceiling


def test_request_overhead_counts_instruction_and_tools_without_an_llm():
    tools = ToolsSchema(standard_tools=[schema("a"), schema("b")])
    none = request_overhead(C)
    only_tools = request_overhead(C, tools=tools)
    both = request_overhead(C, system_instruction="x" * 400, tools=tools)
    assert (
        none == 0
        and only_tools > 20
        and both == only_tools + C.count_message({"role": "system", "content": "x" * 400})
    )


# -- C: manual-only mode ------------------------------------------------------------------


async def test_manual_only_mode_never_triggers_but_honours_manual_frames(openai_server):
    openai_server.handler = lambda body: (
        Reply("FACTS:\n- summarized") if is_summary_request(body) else Reply("Sure thing.")
    )
    context = LLMContext(messages=[{"role": "system", "content": "You are helpful."}])
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(tokens=200, messages=4, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        options=SummarizerOptions(auto_summarize=False),
    )
    applied = []

    @summarizer.event_handler("on_context_compacted")
    async def _applied(_, event):
        applied.append(event)

    said = [f"user message number {i} " + "padding words " * 30 for i in range(10)]
    frames = [
        *turns(said, gap=0.08),  # far over both thresholds
        LLMSummarizeContextFrame(),
        Gap(sleep=5.0),
    ]
    await run_settling(
        pipeline(context, summarizer, main_llm(openai_server.base_url)), frames_to_send=frames
    )
    assert [e.reason for e in applied] == ["manual"]
    assert len(openai_server.summary_requests) == 1


def test_manual_only_flag_defaults_to_automatic():
    assert SummarizerOptions().auto_summarize is True


# -- D: the summary budget --------------------------------------------------------------


def _budget_cfg(target: int, max_tokens: int | None):
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=max_tokens,
        summary_config=LLMContextSummaryConfig(target_context_tokens=target),
    )


@pytest.mark.parametrize(
    ("target", "max_tokens", "expected"),
    [
        (50, 8000, 50),  # below the cap: sent as given (was raised to 100)
        (6000, 8000, 2000),  # Pipecat's defaults: capped at a quarter
        (6000, 50, 12),  # the cap is never exceeded (was 100)
        (6000, 2, 1),
        (700, None, 700),
    ],
)
def test_summary_budget_is_the_target_under_the_cap_and_never_above_it(
    target, max_tokens, expected
):
    assert summary_budget(_budget_cfg(target, max_tokens)) == expected
    if max_tokens is not None:
        assert summary_budget(_budget_cfg(target, max_tokens)) <= max(1, max_tokens // 4)


async def test_a_small_target_reaches_the_summarizer_as_given(openai_server):
    openai_server.handler = lambda body: (
        Reply("FACTS:\n- ok") if is_summary_request(body) else Reply("Sure thing.")
    )
    context = LLMContext(messages=[{"role": "system", "content": "You are helpful."}])
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(tokens=8000, messages=4, keep=2, target_context_tokens=50),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
    )
    await run_settling(
        pipeline(context, summarizer, main_llm(openai_server.base_url)),
        frames_to_send=[*turns([f"m{k}" for k in range(6)], gap=0.08), Gap(sleep=0.2)],
    )
    assert openai_server.summary_requests
    assert {b["max_tokens"] for b in openai_server.summary_requests} == {50}


async def test_a_guard_not_after_an_llm_says_so_and_passes_frames_on(openai_server, logs):
    context = LLMContext(messages=[{"role": "user", "content": "hi"}])
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=50, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
    )
    down, _ = await run_test(
        Pipeline([summarizer, summarizer.after_llm()]),
        frames_to_send=[LLMSummarizeContextFrame(), Gap(sleep=0.1)],
        expected_down_frames=[],  # consumed by the summarizer, not passed on
    )
    assert summarizer.llm is None
    assert [x for x in logs if "not placed right after an LLM" in x["message"]]
