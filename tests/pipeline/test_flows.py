"""Pipecat Flows (``pipecat.flows``, shipped with Pipecat 1.14) with this processor.

A real ``FlowManager`` drives a real pipeline (user aggregator -> ContextSummarizer -> Pipecat's
OpenAI service against the local server -> assistant aggregator). The main LLM moves the flow
on with a transition function; each node change replaces the tool list (``LLMSetToolsFrame``)
and adds the node's task messages (``LLMMessagesAppendFrame`` for APPEND,
``LLMMessagesUpdateFrame`` for RESET).

Run as a script for the figures over several node changes per context strategy:
``.venv/bin/python -m tests.pipeline.test_flows``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field

from pipecat.flows import (
    ContextStrategy,
    ContextStrategyConfig,
    FlowManager,
    FlowsFunctionSchema,
    NodeConfig,
)
from pipecat.frames.frames import EndFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import ContextSummarizer, ContextSummarizerParams, OpenAISummarizer
from pipecat_summarizer._compaction.plan import is_system_like
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.tools import (
    REMEMBER_FACT,
    register_remember_fact,
    remember_fact_flows_function,
)
from tests.support.openai_server import FakeOpenAIServer, Reply, is_summary_request
from tests.support.pipeline_utils import cfg, echo_summary, main_llm, user_turn

NEXT = "next_step"
ALLERGY = "By the way, I am allergic to peanuts."
MEMBER = "My member number is 4417."
# a node's task message: what Flows adds to the context at every node change
TASK = (
    "Step {i} of the intake. Ask the caller for the details this step needs, one question "
    "at a time, confirm each answer back briefly, and call next_step when the step is done. "
    "Keep every answer under two sentences."
)


def _node(i: int, strategy: ContextStrategy | None) -> NodeConfig:
    async def go_next(args, flow_manager):
        return {"step": i}, _node(i + 1, strategy)

    node = NodeConfig(
        name=f"step_{i}",
        role_message="You are the intake assistant of a clinic. Be brief.",
        task_messages=[{"role": "developer", "content": TASK.format(i=i)}],
        functions=[
            FlowsFunctionSchema(
                name=NEXT,
                description="Move to the next step of the intake.",
                properties={},
                required=[],
                handler=go_next,
            )
        ],
    )
    if strategy is not None:
        node["context_strategy"] = ContextStrategyConfig(strategy=strategy)
    return node


def _main_llm_script(ids=None):
    """The main LLM: remembers the allergy and the member number through ``remember_fact``,
    moves on when asked, answers every tool result briefly, summaries echo their input."""
    ids = ids or itertools.count()

    def call(name: str, arguments: dict) -> Reply:
        return Reply(
            tool_calls=[
                {
                    "id": f"call_{next(ids)}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ]
        )

    def handler(body: dict) -> Reply:
        if is_summary_request(body):
            return Reply(echo_summary(body))
        last = body["messages"][-1]
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if last.get("role") == "user":
            text = last.get("content")
            if text == ALLERGY and REMEMBER_FACT in offered:
                return call(REMEMBER_FACT, {"key": "allergy", "fact": "allergic to peanuts"})
            if text == MEMBER and REMEMBER_FACT in offered:
                return call(REMEMBER_FACT, {"key": "member_number", "fact": "member number 4417"})
            if text == "next please" and NEXT in offered:
                return call(NEXT, {})
        return Reply("Noted.")

    return handler


@dataclass
class NodeFigures:
    """What the main LLM was sent at the first request of a node (after the change)."""

    node: int
    messages: int
    system_messages: int  # system/developer messages in the request, head included
    system_tokens: int
    request_tokens: int
    tools: list[str]
    task_at_end: bool = False  # the node's task message is still sent at its last turn
    system_messages_at_end: int = 0


@dataclass
class FlowRun:
    context: LLMContext
    processor: ContextSummarizer
    flow: FlowManager
    server: FakeOpenAIServer
    nodes: list[NodeFigures] = field(default_factory=list)


async def _until(condition, timeout: float = 15.0, what: str = "") -> None:
    """Wait for ``condition()`` (a liveness bound, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"the pipeline did not get there: {what}")
        await asyncio.sleep(0.01)


def _answered(context: LLMContext, text: str | None = None):
    """The context ends with a final assistant answer (no tool call), after the user message
    ``text`` when given (found by content: a compaction may shorten the list meanwhile)."""

    def check() -> bool:
        messages = context.messages
        if not messages or messages[-1].get("role") != "assistant":
            return False
        if messages[-1].get("tool_calls"):
            return False
        if text is None:
            return True
        return any(m.get("role") == "user" and m.get("content") == text for m in messages)

    return check


async def run_flow(
    server: FakeOpenAIServer,
    *,
    strategy: ContextStrategy | None = None,
    nodes: int = 4,
    turns_per_node: int = 4,
    flows_tool: bool = True,
    protect_injected_system: bool = True,
    app_fact: str | None = None,
) -> FlowRun:
    """A call through ``nodes`` node changes; the allergy is said in node 0 and the member
    number in the last node. ``flows_tool=False`` registers ``remember_fact`` the classic way
    (``register_remember_fact``), which a node change takes off the tool list."""
    server.handler = _main_llm_script()
    context = LLMContext()
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=8, keep=4),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        params=ContextSummarizerParams(protect_injected_system=protect_injected_system),
    )
    if app_fact is not None:
        processor.pin("hours", app_fact)  # the application's own fact (developer role)
    llm = main_llm(server.base_url)
    pair = LLMContextAggregatorPair(context)
    task = PipelineWorker(
        Pipeline([pair.user(), processor, llm, pair.assistant()]),
        params=PipelineParams(),
        cancel_on_idle_timeout=False,
    )
    global_functions = []
    if flows_tool:
        global_functions.append(FlowsFunctionSchema(**remember_fact_flows_function(processor)))
    else:
        register_remember_fact(llm, processor, context)
    flow = FlowManager(
        worker=task,
        llm=llm,
        context_aggregator=pair,
        context_strategy=ContextStrategyConfig(strategy=strategy or ContextStrategy.APPEND),
        global_functions=global_functions,
    )
    run = FlowRun(context, processor, flow, server)
    counter = EstimateTokenCounter()
    started = asyncio.Event()

    @task.event_handler("on_pipeline_started")
    async def _started(_task, _frame):
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(task)
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        n = 0
        for i in range(nodes):
            if i == 0:
                await flow.initialize(_node(0, strategy))
            await _until(lambda i=i: flow.current_node == f"step_{i}", what=f"node {i}")
            await _until(_answered(context), what=f"node {i}'s first answer")
            first = next(
                b
                for b in server.chat_requests
                if any(TASK.format(i=i) == m.get("content") for m in b["messages"])
            )
            system = [m for m in first["messages"] if is_system_like(m)]
            run.nodes.append(
                NodeFigures(
                    node=i,
                    messages=len(first["messages"]),
                    system_messages=len(system),
                    system_tokens=sum(counter.count_message(m) for m in system),
                    request_tokens=sum(counter.count_message(m) for m in first["messages"]),
                    tools=sorted(t["function"]["name"] for t in first.get("tools") or []),
                )
            )
            says = [
                f"user message number {n + k} about the intake details"
                for k in range(turns_per_node)
            ]
            n += turns_per_node
            if i == 0:
                says[1] = ALLERGY
            if i == nodes - 1:
                says[-1] = MEMBER
            for text in says:
                await task.queue_frames([user_turn(text)])
                await _until(_answered(context, text), what=f"an answer to {text!r}")
            last = server.chat_requests[-1]["messages"]
            run.nodes[-1].task_at_end = any(m.get("content") == TASK.format(i=i) for m in last)
            run.nodes[-1].system_messages_at_end = sum(1 for m in last if is_system_like(m))
            if i < nodes - 1:
                await task.queue_frames([user_turn("next please")])
                await _until(lambda i=i: flow.current_node == f"step_{i + 1}", what="next")
        await _until(lambda: not processor.summary_in_flight)
    finally:
        await task.queue_frame(EndFrame())
        await asyncio.wait_for(running, 15)
    return run


# -- the tests -------------------------------------------------------------------------------


async def test_remember_fact_is_offered_and_works_after_node_changes(openai_server):
    run = await run_flow(openai_server, nodes=3, turns_per_node=3)
    # offered at every node, next to the node's own function
    assert all(REMEMBER_FACT in f.tools and NEXT in f.tools for f in run.nodes)
    facts = {f.key: f.text for f in run.processor.record.facts.facts}
    # said in the first node and in the last: both pinned, by the tool's Flows handler
    assert "allergy" in facts and "member_number" in facts
    # and shown to the model in the requests after the change
    last = openai_server.chat_requests[-1]["messages"]
    assert any("4417" in str(m.get("content")) for m in last)
    assert any("peanuts" in str(m.get("content")) for m in last)


async def test_classic_registration_is_replaced_by_the_nodes_tool_lists(openai_server):
    """Why the Flows form exists: ``register_remember_fact`` adds the schema to the context's
    tools, and Flows replaces them at every node (the first one included)."""
    run = await run_flow(openai_server, nodes=2, turns_per_node=3, flows_tool=False)
    assert all(REMEMBER_FACT not in f.tools for f in run.nodes)
    facts = {f.key for f in run.processor.record.facts.facts}
    assert "member_number" not in facts


async def test_append_keeps_every_task_message_verbatim_and_out_of_the_summaries(openai_server):
    """Flows' default APPEND with the default ``protect_injected_system=True``: each node change
    leaves its task message in place, verbatim (one more message per change, never summarized),
    and the current node's instructions are sent up to its last turn."""
    run = await run_flow(openai_server, nodes=4, turns_per_node=4)
    assert [f.system_messages for f in run.nodes] == [2, 3, 4, 5]  # system_instruction + tasks
    assert all(f.task_at_end for f in run.nodes)
    last = openai_server.chat_requests[-1]["messages"]
    for i in range(4):
        assert sum(m.get("content") == TASK.format(i=i) for m in last) == 1
    # compactions happened, and no task message text went to the summarizer
    assert openai_server.summary_requests
    assert not any("Step 1 of the intake" in json.dumps(b) for b in openai_server.summary_requests)


async def test_reset_keeps_the_request_flat_and_the_pinned_facts(openai_server):
    """RESET replaces the context at each node change: the request stays flat, and what this
    processor pinned (the allergy, said in the first node) is still sent in the last node."""
    hours = "The clinic closes at 6 pm."
    run = await run_flow(
        openai_server, strategy=ContextStrategy.RESET, nodes=4, turns_per_node=4, app_fact=hours
    )
    assert len({f.system_messages for f in run.nodes}) == 1
    assert all(f.task_at_end for f in run.nodes)
    last = openai_server.chat_requests[-1]["messages"]
    assert not any(m.get("content") == TASK.format(i=0) for m in last)  # the old node is gone
    facts = [m for m in last if "peanuts" in str(m.get("content"))]
    assert facts and all(m["role"] == "user" for m in facts)  # conversation data, user role
    app = [m for m in last if hours in str(m.get("content"))]
    assert app and all(m["role"] == "developer" for m in app)  # the application's, with authority


async def test_unprotected_task_messages_are_summarized_away_mid_node(openai_server):
    """Why ``protect_injected_system=False`` must not be used with Flows' APPEND: the current
    node's instructions leave the request before the node is over."""
    run = await run_flow(openai_server, nodes=3, turns_per_node=4, protect_injected_system=False)
    assert not all(f.task_at_end for f in run.nodes[1:])


if __name__ == "__main__":  # pragma: no cover - figures for the README

    async def _figures() -> None:
        for strategy, protect in (
            (ContextStrategy.APPEND, True),
            (ContextStrategy.APPEND, False),
            (ContextStrategy.RESET, True),
        ):
            server = FakeOpenAIServer()
            await server.start()
            try:
                run = await run_flow(server, strategy=strategy, nodes=6, turns_per_node=4,
                                     protect_injected_system=protect)  # fmt: skip
            finally:
                await server.stop()
            print(f"\n{strategy.name}, protect_injected_system={protect}")
            print(
                "node  messages  system msgs  system tokens  request tokens  "
                "task kept to node end  system msgs at node end"
            )
            for f in run.nodes:
                print(
                    f"{f.node:>4}  {f.messages:>8}  {f.system_messages:>11}  "
                    f"{f.system_tokens:>13}  {f.request_tokens:>14}  "
                    f"{'yes' if f.task_at_end else 'NO':>21}  {f.system_messages_at_end:>23}"
                )
            print(f"summary requests: {len(server.summary_requests)}")
            facts = sorted(f.key for f in run.processor.record.facts.facts)
            print(f"pinned at the end: {facts}")

    asyncio.run(_figures())
