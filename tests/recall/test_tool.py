"""The ``recall_memory`` tool: the main LLM searches the archive with its own words, through a
real pipeline (Pipecat's OpenAI service against the local server), and the Flows form."""

from __future__ import annotations

import json

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.tools import (
    RECALL_MEMORY,
    recall_memory_flows_function,
    recall_memory_result,
    register_recall_memory,
    register_remember_fact,
)
from tests.recall.test_recall_pipeline import FAST, FILLER, HOTEL, _summaries
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.recall_calls import asks_recall
from tests.support.settle import run_settling

_OPEN: list[OpenAISummarizer] = []


def _summarizer(base_url: str) -> OpenAISummarizer:
    s = OpenAISummarizer(base_url=base_url, model="cheap")
    _OPEN.append(s)  # the application's clients: closed after each test
    return s


@pytest.fixture(autouse=True)
async def _close_clients():
    yield
    while _OPEN:
        await _OPEN.pop().aclose()


def _processor(server, store, context, recall=None):
    return ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=_summarizer(server.base_url),
        store=store,
        call_id="call-1",
        memory=MemoryParams(writer=FAST),
        recall=recall or RecallParams(enabled=False, tool_timeout_s=5.0),
    )


async def test_recall_memory_tool_through_a_real_pipeline(openai_server, tmp_path):
    asked = "Remind me where we are staying?"
    openai_server.handler = asks_recall(asked, "hotel Lisbon", _summaries)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = _processor(openai_server, store, context)
    llm = main_llm(openai_server.base_url)
    register_remember_fact(llm, processor, context)
    schema = register_recall_memory(llm, processor, context)  # the one line
    assert schema.name == RECALL_MEMORY
    try:
        await run_settling(
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
    no_recall = ContextSummarizer(context=context, summarizer=_summarizer("http://127.0.0.1:9"))
    assert "not configured" in (await recall_memory_result(no_recall, {"query": "x"}))["error"]

    class Down(SQLiteMemoryStore):
        async def search(self, query, **kwargs):
            raise ConnectionError("database is down")

    store = Down()
    processor = ContextSummarizer(
        context=context,
        summarizer=_summarizer("http://127.0.0.1:9"),
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
        await run_settling(
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


async def test_recall_memory_in_a_real_flows_app_after_a_node_change(openai_server, tmp_path):
    """``pipecat.flows`` (shipped with Pipecat 1.14): a node change replaces the tool list;
    ``recall_memory`` given as a global function is still offered and answers there."""
    import asyncio
    import itertools

    from pipecat.flows import FlowManager, FlowsFunctionSchema, NodeConfig
    from pipecat.frames.frames import EndFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.workers.runner import WorkerRunner

    from tests.support.pipeline_utils import user_turn

    ids = itertools.count()
    asked = "Remind me where we are staying?"
    replied: set[str] = set()

    def node(i: int) -> NodeConfig:
        async def go_next(args, flow_manager):
            return {"step": i}, node(i + 1)

        return NodeConfig(
            name=f"step_{i}",
            role_message="You are a concierge. Be brief.",
            task_messages=[{"role": "developer", "content": f"Step {i}."}],
            functions=[
                FlowsFunctionSchema(
                    name="next_step",
                    description="Next.",
                    properties={},
                    required=[],
                    handler=go_next,
                )
            ],
        )

    def call(name, arguments):
        return Reply(
            tool_calls=[
                {
                    "id": f"call_{next(ids)}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ]
        )

    def handler(body):
        if is_summary_request(body):
            return _summaries(body)
        last = body["messages"][-1]
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if last.get("role") == "user" and last.get("content") == "next please":
            return call("next_step", {})
        if last.get("role") == "user" and last.get("content") == asked:
            assert RECALL_MEMORY in offered  # still offered after the node change
            return call(RECALL_MEMORY, {"query": "hotel Lisbon"})
        replied.update(m.get("content") for m in body["messages"] if m.get("role") == "user")
        return Reply("Noted.")

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext()
    processor = _processor(openai_server, store, context)
    llm = main_llm(openai_server.base_url)
    pair = LLMContextAggregatorPair(context)
    worker = PipelineWorker(
        Pipeline([pair.user(), processor, llm, pair.assistant()]),
        params=PipelineParams(),
        cancel_on_idle_timeout=False,
    )
    flow = FlowManager(
        worker=worker,
        llm=llm,
        context_aggregator=pair,
        global_functions=[FlowsFunctionSchema(**recall_memory_flows_function(processor))],
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_w, _f):
        started.set()

    async def until(condition, what):
        for _ in range(6000):  # a liveness bound (60 s on a loaded machine), not a timing assertion
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the pipeline did not get there: {what}")

    def answered(text):
        # a plain reply was sent to a request holding ``text`` and has landed: the text itself
        # may be summarized away by then (six messages trigger a compaction)
        def check():
            m = context.messages
            return (
                text in replied
                and bool(m)
                and m[-1].get("role") == "assistant"
                and not m[-1].get("tool_calls")
            )

        return check

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        await flow.initialize(node(0))
        # the first node responds as it starts: a caller speaking before that reply lands would
        # race it, and the two replies would shift every later turn by one
        await until(lambda: any(m.get("role") == "assistant" for m in context.messages), "greeting")
        for text in [HOTEL, *FILLER, "next please"]:
            await worker.queue_frames([user_turn(text)])
            await until(answered(text), text)
        await until(lambda: flow.current_node == "step_1", "node change")
        await worker.queue_frames([user_turn(asked)])
        await until(answered(asked), asked)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 15)
        await store.close()
    results = [
        m
        for b in openai_server.chat_requests
        for m in b["messages"]
        if m["role"] == "tool" and "found" in str(m.get("content"))
    ]
    assert results
    assert any("Hotel Marquis" in f["text"] for f in json.loads(results[-1]["content"])["found"])


class _SlowFirstWrite(SQLiteMemoryStore):
    """A real SQLite store whose first write takes a while (a cold database on a busy disk)."""

    slow = True

    async def write(self, records):
        import asyncio

        if self.slow:
            self.slow = False
            await asyncio.sleep(0.4)
        await super().write(records)


@pytest.mark.parametrize("settles", [True, False])
async def test_recall_memory_finds_what_left_the_context_moments_ago(tmp_path, settles):
    """A message summarized away while the archive's first write is still running is found by
    the tool: the lookup lets the queued writes land first (half the tool's wait). Without
    that (``settles=False``) the same lookup comes back empty: this test can fail."""
    from pipecat_summarizer._recall.step import RecallStep
    from pipecat_summarizer._session.recorder import CallRecorder

    store = _SlowFirstWrite(tmp_path / "m.db")
    recorder = CallRecorder(store, "call-1", options=MemoryParams(writer=FAST))
    recorder.start()
    recorder.archive([{"role": "user", "content": HOTEL}], "summarized", compaction=1)
    step = RecallStep(
        store,
        RecallParams(tool_timeout_s=5.0),
        call_id=recorder.session_id,
        settle=recorder.writer.flush if settles else None,
    )
    try:
        found = await step.lookup("hotel Lisbon")
    finally:
        await recorder.writer.close()
        await store.close()
    texts = [f["text"] for f in found]
    if settles:
        assert any("Hotel Marquis" in t for t in texts), texts
    else:
        assert texts == []
