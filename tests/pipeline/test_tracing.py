"""Tracing, Pipecat's way: with ``PipelineWorker(enable_tracing=True)`` each compaction, failed
summary, eviction and recall is a span in the conversation's trace (a child of Pipecat's turn
span), with GenAI attributes and never a word of the conversation. Real pipelines (a real
``LLMContextAggregatorPair``, Pipecat's OpenAI service and ``OpenAISummarizer`` against the
local OpenAI-protocol server, a real SQLite store), spans read from OpenTelemetry's
``InMemorySpanExporter``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import (
    CeilingParams,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    RetryParams,
    WriterParams,
)
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.tools import RECALL_MEMORY, register_recall_memory
from pipecat_summarizer.tracing import (
    SPAN_COMPACTION,
    SPAN_EVICTION,
    SPAN_RECALL,
    error_type,
    event_attributes,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, user_turn
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
CONVERSATION = "conv-tracing-1"

_EXPORTER = InMemorySpanExporter()


def _install_exporter() -> InMemorySpanExporter:
    """One SDK tracer provider per test process (OpenTelemetry's global is set once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_pipecat_summarizer_test", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._pipecat_summarizer_test = True  # type: ignore[attr-defined]
    return _EXPORTER


@pytest.fixture
def spans():
    exporter = _install_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()


_OPEN: list[OpenAISummarizer] = []


@pytest.fixture(autouse=True)
async def _close_clients():
    yield
    while _OPEN:
        await _OPEN.pop().aclose()


def _summarizer(base_url: str) -> OpenAISummarizer:
    s = OpenAISummarizer(base_url=base_url, model="summary-model")
    _OPEN.append(s)
    return s


def spoken_turns(texts: list[str], gap: float = 0.25) -> list[Frame]:
    """Each text as a spoken user turn and an answer the bot speaks: Pipecat's turn tracker
    opens a turn span on the user's speech after the bot has spoken."""
    frames: list[Frame] = []
    for text in texts:
        frames += [UserStartedSpeakingFrame(), UserStoppedSpeakingFrame(), user_turn(text)]
        frames.append(SleepFrame(sleep=gap))
        frames += [BotStartedSpeakingFrame(), BotStoppedSpeakingFrame()]
    return frames


async def run_traced(pipeline: Pipeline, frames: list[Frame], *, tracing: bool = True) -> None:
    """Run ``pipeline`` under a ``PipelineWorker`` with Pipecat's tracing switch; each pause
    after a turn ends once settled (``tests.support.settle``)."""
    await run_settling(
        pipeline,
        frames_to_send=[Gap(sleep=f.sleep) if type(f) is SleepFrame else f for f in frames],
        enable_tracing=tracing,
        conversation_id=CONVERSATION,
    )


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def _ours(finished: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in finished if s.instrumentation_scope.name == "pipecat_summarizer"]


def _words(texts: list[str]) -> set[str]:
    """The call's words worth looking for (long enough not to be an id by chance)."""
    return {w.lower() for t in texts for w in re.findall(r"[A-Za-z]{4,}", t)}


def _leaks(ours: list[ReadableSpan], words: set[str]) -> list[tuple[str, str, str]]:
    """(span, attribute, word) for every call word found in any attribute value of ours."""
    found = []
    for span in ours:
        for key, value in (span.attributes or {}).items():
            text = str(value).lower()
            for w in words:
                if w in text:
                    found.append((span.name, key, w))
        description = (span.status.description or "").lower()
        found += [(span.name, "status", w) for w in words if w in description]
    return found


HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
FILLER = [
    "What time does the breakfast buffet open tomorrow?",
    "Is the spa open on Sunday afternoon?",
    "Can I book a table for dinner tonight?",
    "Do you have a gluten free menu?",
    "How late is the swimming pool open?",
    "Could you send fresh towels upstairs please?",
]
ASKED = "Remind me which hotel we are staying at?"
SUMMARY = "FACTS:\n- caller asked about breakfast buffet\nDECISIONS:\n- none"
ANSWER = "Certainly, happy to help with that."


async def test_a_traced_call_has_its_compactions_recalls_and_tool_as_spans_without_text(
    openai_server, tmp_path, spans
):
    tool_calls = iter(
        [
            Reply(
                tool_calls=[
                    {
                        "id": "call_r1",
                        "type": "function",
                        "function": {
                            "name": RECALL_MEMORY,
                            "arguments": json.dumps({"query": "hotel Lisbon"}),
                        },
                    }
                ]
            )
        ]
    )

    def handler(body):
        if is_summary_request(body):
            return Reply(SUMMARY)
        last = body["messages"][-1]
        if last.get("role") == "user" and last.get("content") == ASKED:
            return next(tool_calls, Reply(ANSWER))
        return Reply(ANSWER)

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=_summarizer(openai_server.base_url),
        store=store,
        call_id="call-1",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=5.0, tool_timeout_s=5.0),
    )
    llm = main_llm(openai_server.base_url)
    register_recall_memory(llm, processor, context)
    applied: list = []

    @processor.event_handler("on_context_compacted")
    async def _applied(_p, event):
        applied.append(event)

    said = [HOTEL, *FILLER, ASKED, "Thanks, that is all."]
    try:
        await run_traced(build(context, processor, llm), spoken_turns(said, gap=0.3))
    finally:
        await store.close()

    finished = spans.get_finished_spans()
    turns = _by_name(finished, "turn")
    conversation = _by_name(finished, "conversation")
    assert len(conversation) == 1 and len(turns) >= len(said)
    turn_ids = {t.context.span_id for t in turns}

    # one compaction span per applied compaction, with its figures and GenAI names
    compactions = _by_name(finished, SPAN_COMPACTION)
    assert applied and len(compactions) == len(applied)
    first = compactions[0].attributes or {}
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "summary-model"
    assert first["gen_ai.conversation.id"] == CONVERSATION
    assert first["pipecat_summarizer.outcome"] == "applied"
    assert first["pipecat_summarizer.compaction"] == 1
    assert first["pipecat_summarizer.reason"] == applied[0].reason
    assert first["pipecat_summarizer.messages_summarized"] == applied[0].messages_summarized
    assert first["pipecat_summarizer.tokens_before"] == applied[0].tokens_before
    assert first["pipecat_summarizer.tokens_after"] == applied[0].tokens_after
    # the secondary LLM's usage as it reported it (the local server reports usage)
    assert applied[0].summary_prompt_tokens is not None
    assert first["gen_ai.usage.input_tokens"] == applied[0].summary_prompt_tokens
    assert first["gen_ai.usage.output_tokens"] == applied[0].summary_completion_tokens
    assert first["pipecat_summarizer.usage_estimated"] is False
    assert first["pipecat_summarizer.call_id"] == "call-1"
    # the span covers the work: its duration is the event's latency (job start to splice)
    c = compactions[0]
    assert c.end_time is not None and c.start_time is not None
    assert abs((c.end_time - c.start_time) / 1e9 - applied[0].latency_s) < 1e-3
    # in the conversation's trace, under a turn span (or the conversation between turns)
    trace_id = conversation[0].context.trace_id
    for span in _ours(finished):
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id in turn_ids | {conversation[0].context.span_id}

    # per-turn recall: one span per user turn, under that turn; the question was recalled
    recalls = _by_name(finished, SPAN_RECALL)
    per_turn = [s for s in recalls if s.attributes["pipecat_summarizer.recall.kind"] == "turn"]
    assert len(per_turn) == len(said)
    assert all(s.parent is not None and s.parent.span_id in turn_ids for s in per_turn)
    assert all(s.attributes["gen_ai.operation.name"] == "search_memory" for s in per_turn)
    outcomes = [s.attributes["pipecat_summarizer.outcome"] for s in per_turn]
    assert "recalled" in outcomes
    recalled = next(s for s in per_turn if s.attributes["pipecat_summarizer.outcome"] == "recalled")
    assert recalled.attributes["pipecat_summarizer.recall.tokens"] > 0
    # the recall_memory tool: its own span, with the records it returned
    tool = [s for s in recalls if s.attributes["pipecat_summarizer.recall.kind"] == "tool"]
    assert len(tool) == 1
    assert tool[0].attributes["pipecat_summarizer.outcome"] == "found"
    assert tool[0].attributes["gen_ai.memory.record.count"] >= 1

    # never a word of the call, the summary or the recalled text in any of our spans
    words = _words([*said, SUMMARY, ANSWER, "Be brief.", "hotel Lisbon"])
    assert _leaks(_ours(finished), words) == []
    assert _leaks(_by_name(finished, "llm"), words)  # the scan finds words where they are


async def test_failed_summaries_and_evictions_are_spans_with_the_error_type(openai_server, spans):
    ceiling = 900
    failing = {"on": True}

    def handler(body):
        if is_summary_request(body):
            return Reply(status=500) if failing["on"] else Reply(SUMMARY)
        return Reply(ANSWER)

    openai_server.handler = handler
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(tokens=600, messages=None, keep=2),
        summarizer=_summarizer(openai_server.base_url),
        params=ContextSummarizerParams(
            max_summary_input_tokens=400,
            retry=RetryParams(backoff_s=0),
            ceiling=CeilingParams(max_request_tokens=ceiling),
        ),
    )
    failed: list = []
    evicted: list = []

    @processor.event_handler("on_summary_failed")
    async def _failed(_p, event):
        failed.append(event)

    @processor.event_handler("on_messages_evicted")
    async def _evicted(_p, event):
        evicted.append(event)
        failing["on"] = False  # the outage ends once the ceiling has had to act

    said = [f"user message number {i} " + "lorem " * 30 for i in range(24)]
    await run_traced(
        build(context, processor, main_llm(openai_server.base_url)),
        [
            *spoken_turns(said, gap=0.06),
            SleepFrame(sleep=0.5),
        ],
    )

    finished = spans.get_finished_spans()
    compactions = _by_name(finished, SPAN_COMPACTION)
    failures = [s for s in compactions if s.attributes["pipecat_summarizer.outcome"] == "failed"]
    assert failed and len(failures) == len(failed)
    assert all(e.latency_s > 0 for e in failed)  # the span covers the failed attempt
    f = failures[0]
    assert f.status.status_code == trace.StatusCode.ERROR
    assert f.attributes["error.type"] == "500"
    assert f.attributes["pipecat_summarizer.consecutive_failures"] == 1
    assert f.attributes["pipecat_summarizer.reason"] == failed[0].reason
    evictions = _by_name(finished, SPAN_EVICTION)
    assert evicted and len(evictions) == len(evicted)
    e = evictions[0].attributes
    assert e["pipecat_summarizer.messages_evicted"] == evicted[0].messages_evicted
    assert e["pipecat_summarizer.ceiling"] == ceiling
    assert e["pipecat_summarizer.reason"] == "ceiling"
    assert _leaks(_ours(finished), _words([*said, SUMMARY, ANSWER])) == []


async def test_tracing_off_makes_no_span(openai_server, spans):
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=4, keep=2),
        summarizer=_summarizer(openai_server.base_url),
    )
    applied: list = []

    @processor.event_handler("on_context_compacted")
    async def _applied(_p, event):
        applied.append(event)

    await run_traced(
        build(context, processor, main_llm(openai_server.base_url)),
        spoken_turns(FILLER[:4], gap=0.2),
        tracing=False,
    )
    assert applied  # the work happened
    assert spans.get_finished_spans() == ()


def test_without_opentelemetry_the_package_imports_and_a_call_runs_untraced():
    # a fresh interpreter where `import opentelemetry` fails: Pipecat then reports tracing
    # unavailable, and a pipeline asking for it runs without it
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # blocks the import
        from pipecat.frames.frames import EndFrame, LLMMessagesAppendFrame
        from pipecat.pipeline.pipeline import Pipeline
        from pipecat.pipeline.runner import WorkerRunner
        from pipecat.pipeline.worker import PipelineWorker
        from pipecat.processors.aggregators.llm_context import LLMContext
        from pipecat.processors.aggregators.llm_response_universal import (
            LLMContextAggregatorPair,
        )
        import pipecat_summarizer
        from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer
        from pipecat_summarizer.tracing import tracing_available

        assert not tracing_available()

        async def main():
            context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
            processor = ContextSummarizer(context=context, summarizer=ExtractiveSummarizer())
            pair = LLMContextAggregatorPair(context)
            worker = PipelineWorker(
                Pipeline([pair.user(), processor]),
                enable_tracing=True,
                cancel_on_idle_timeout=False,
            )
            @worker.event_handler("on_pipeline_started")
            async def started(w, f):
                await w.queue_frame(LLMMessagesAppendFrame(
                    messages=[{"role": "user", "content": "hello"}], run_llm=True))
                await w.queue_frame(EndFrame())
            runner = WorkerRunner()
            await runner.add_workers(worker)
            await runner.run()
            assert [m["content"] for m in context.get_messages()][-1] == "hello"

        asyncio.run(main())
        assert not any(m.startswith("opentelemetry") for m, v in sys.modules.items() if v)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


# -- the pure rules ---------------------------------------------------------------------------


def test_error_type_is_low_cardinality():
    assert error_type("summarizer timed out after 5s") == "timeout"
    assert error_type("APIStatusError: HTTP 500 type=server_error to 127.0.0.1") == "500"
    assert error_type("SummarizerError: empty summary") == "SummarizerError"
    assert error_type("") == "_OTHER"


def test_event_attributes_copy_numbers_and_ids_never_other_strings():
    from dataclasses import dataclass

    @dataclass
    class Event:
        reason: str
        tokens: int
        ratio: float
        ok: bool
        summary_sha256: str
        note: str  # a string field that is not an identifier: left out
        items: tuple[str, ...]

    attrs = event_attributes(Event("tokens", 5, 0.5, True, "abc123", "the caller said hi", ("x",)))
    assert attrs == {
        "pipecat_summarizer.reason": "tokens",
        "pipecat_summarizer.tokens": 5,
        "pipecat_summarizer.ratio": 0.5,
        "pipecat_summarizer.ok": True,
        "pipecat_summarizer.summary_sha256": "abc123",
    }


# -- tool-result clearing ---------------------------------------------------------------------


def _lookup_call(call_id: str, order: str) -> Reply:
    function = {"name": "lookup_order", "arguments": json.dumps({"order": order})}
    return Reply(tool_calls=[{"id": call_id, "type": "function", "function": function}])


def _orders_handler(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply(SUMMARY)
    last = body["messages"][-1]
    text = last.get("content") if last.get("role") == "user" else None
    if isinstance(text, str) and text.startswith("Look up order "):
        order = text.rsplit(" ", 1)[1]
        return _lookup_call(f"call_{order}", order)
    return Reply("Here it is." if last.get("role") == "tool" else ANSWER)


ORDERS_SAID = [f"Look up order {o}" for o in ("A17", "B23", "C31", "D47", "E59")] + ["ok"]
TRACKING = "ZEBRA417 OTTER523 HERON631 LYNX747 PUFFIN859"


async def _orders_call(server, tmp_path, config, clearing) -> tuple[ContextSummarizer, list]:
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema

    server.handler = _orders_handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=config,
        params=ContextSummarizerParams(clearing=clearing),
        summarizer=_summarizer(server.base_url),
        store=store,
        memory=MemoryParams(writer=FAST),
    )
    llm = main_llm(server.base_url)
    codes = dict(zip(("A17", "B23", "C31", "D47", "E59"), TRACKING.split(), strict=True))

    async def lookup_order(params):
        order = params.arguments["order"]
        await params.result_callback(
            {"order": order, "tracking": codes[order], "history": "scanned at depot " * 150}
        )

    llm.register_function("lookup_order", lookup_order)
    schema = FunctionSchema(name="lookup_order", description="x", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[schema]))
    compacted: list = []

    @processor.event_handler("on_context_compacted")
    async def _compacted(_p, event):
        compacted.append(event)

    try:
        await run_traced(build(context, processor, llm), spoken_turns(ORDERS_SAID, gap=0.35))
    finally:
        await store.close()
    return processor, compacted


async def test_clearing_with_a_compaction_is_on_the_compaction_span(openai_server, tmp_path, spans):
    from pipecat_summarizer.params import ClearingParams

    clearing = ClearingParams(keep_latest=1, min_result_tokens=0, min_freed_tokens=100)
    _, compacted = await _orders_call(openai_server, tmp_path, cfg(messages=10, keep=6), clearing)
    finished = spans.get_finished_spans()
    batched = [e for e in compacted if e.tool_results_cleared]
    assert batched, compacted
    spans_of = {
        s.attributes["pipecat_summarizer.compaction"]: s.attributes
        for s in _by_name(finished, SPAN_COMPACTION)
    }
    attrs = spans_of[batched[0].compaction]
    assert attrs["pipecat_summarizer.tool_results_cleared"] == batched[0].tool_results_cleared
    assert attrs["pipecat_summarizer.tokens_cleared"] == batched[0].tokens_cleared > 0
    # the tool's name is the application's identifier (on the clearing span): not call words
    words = _words([*ORDERS_SAID, TRACKING, "scanned at depot", SUMMARY, ANSWER]) - {
        "look",
        "order",
    }
    assert _leaks(_ours(finished), words) == []


async def test_clearing_alone_is_a_clearing_span(openai_server, tmp_path, spans):
    from pipecat_summarizer.params import ClearingParams
    from pipecat_summarizer.tracing import SPAN_CLEARING

    clearing = ClearingParams(keep_latest=2, min_result_tokens=0, min_freed_tokens=200)
    processor, _ = await _orders_call(
        openai_server, tmp_path, cfg(tokens=3200, messages=60, keep=4), clearing
    )
    if "on_tool_results_cleared" not in processor._event_handlers:
        pytest.skip("the processor does not emit on_tool_results_cleared yet")
    finished = spans.get_finished_spans()
    cleared = _by_name(finished, SPAN_CLEARING)
    assert cleared
    attrs = cleared[0].attributes
    assert attrs["pipecat_summarizer.tool_results_cleared"] >= 1
    assert attrs["pipecat_summarizer.tokens_cleared"] > 0
    assert attrs["pipecat_summarizer.tools"] == ("lookup_order",) * len(
        attrs["pipecat_summarizer.tools"]
    )
    assert cleared[0].parent is not None
    # the tool's name is the application's identifier (on the clearing span): not call words
    words = _words([*ORDERS_SAID, TRACKING, "scanned at depot", SUMMARY, ANSWER]) - {
        "look",
        "order",
    }
    assert _leaks(_ours(finished), words) == []
