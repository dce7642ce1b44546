"""Many calls in one process through one shared summarizer.

Shared by ``tests/pipeline/test_many_calls.py`` and ``benchmarks/many_calls.py``. Each call is a
real Pipecat pipeline (user aggregator, ``ContextSummarizer``, a stand-in main LLM that
answers at once, assistant aggregator); every call's summaries go through ONE
``OpenAISummarizer`` with ``max_concurrency`` to the real aiohttp server on 127.0.0.1,
whose summaries echo the unique tokens of the transcript they were given, so cross-talk
between calls would show in the context.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
import tracemalloc
import warnings
from dataclasses import dataclass, field

import openai
from pipecat.frames.frames import (
    DataFrame,
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer, SummarizerOptions
from tests.support.openai_server import FakeOpenAIServer, Reply, is_summary_request
from tests.support.pipeline_utils import cfg, user_turn

TOKEN = re.compile(r"\bc(\d+)t(\d+)x\b")  # "c17t3x": call 17, turn 3


class InstantLLM(FrameProcessor):
    """Stands in for the main LLM: answers every context frame at once, no network.

    The main LLM is not what this scenario measures, and 200 streaming clients would
    drown the summarizer's connections in the server's counts.
    """

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Answer context frames; pass everything else on."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            await self.push_frame(LLMTextFrame("Noted."))
            await self.push_frame(LLMFullResponseEndFrame())
            return
        await self.push_frame(frame, direction)


class WaitForSummaries(DataFrame):
    """Held by :class:`Gate` until the call's summary is no longer in flight."""


class Gate(FrameProcessor):
    """First in the pipeline: holds :class:`WaitForSummaries` (and so the EndFrame queued
    behind it) until the call's last summary has landed. A real call may end with its
    summary still waiting for a slot (it is then cancelled, correctly); this scenario wants
    every summary to count, whatever the machine's speed."""

    def __init__(self, summarizer: ContextSummarizer):
        super().__init__()
        self._summarizer = summarizer

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Hold the marker until no summary is in flight; pass everything on."""
        await super().process_frame(frame, direction)
        if isinstance(frame, WaitForSummaries):
            while self._summarizer.summary_in_flight:
                await asyncio.sleep(0.02)
            return
        await self.push_frame(frame, direction)


def echo_tokens(body: dict) -> Reply:
    """Summaries keep every call/turn token of the transcript they were sent."""
    if not is_summary_request(body):
        return Reply("Noted.")
    seen = sorted(set(TOKEN.findall(body["messages"][1]["content"])), key=lambda t: int(t[1]))
    facts = "\n".join(f"- said c{c}t{t}x" for c, t in seen) or "- none"
    return Reply(f"FACTS:\n{facts}")


@dataclass
class Figures:
    """What one run measured."""

    calls: int
    turns: int
    cap: int
    seconds: float = 0.0
    summary_requests: int = 0
    applied: int = 0
    failed: int = 0
    peak_in_flight: int = 0
    connections_during: int = 0
    connections_after_close: int = -1
    resource_warnings: int = 0
    per_call_kb: float = 0.0
    per_call_package_kb: float = 0.0
    per_processor_kb: float = 0.0
    cross_talk: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The figures on one line."""
        return (
            f"calls={self.calls} turns/call={self.turns} cap={self.cap} "
            f"summary_requests={self.summary_requests} applied={self.applied} "
            f"failed={self.failed} peak_in_flight={self.peak_in_flight} "
            f"connections_during={self.connections_during} "
            f"connections_after_close={self.connections_after_close} "
            f"resource_warnings={self.resource_warnings} seconds={self.seconds:.1f} "
            f"per_call_kb={self.per_call_kb:.1f} "
            f"per_call_package_kb={self.per_call_package_kb:.1f} "
            f"per_processor_kb={self.per_processor_kb:.1f}"
        )


class Call:
    """One call: its context, processor and applied/failed events."""

    def __init__(self, index: int, summarizer: OpenAISummarizer):
        self.index = index
        self.context = LLMContext(messages=[{"role": "system", "content": "You help."}])
        self.processor = ContextSummarizer(
            context=self.context,
            config=cfg(messages=4, keep=1),
            summarizer=summarizer,
            options=SummarizerOptions(retry_backoff_s=0.05),
        )
        self.applied: list = []
        self.failed: list = []

        @self.processor.event_handler("on_context_compacted")
        async def _applied(_, event):
            self.applied.append(event)

        @self.processor.event_handler("on_summary_failed")
        async def _failed(_, event):
            self.failed.append(event)

    def said(self, turns: int) -> list[str]:
        return [f"Call turn c{self.index}t{t}x, with a few words." for t in range(turns)]

    async def run(self, turns: int, gap: float) -> None:
        # External turn strategies: the default one loads an ONNX smart-turn model per call
        # (about 50 ms each), which would dominate the run; turns here arrive as frames
        user_params = LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies())
        pair = LLMContextAggregatorPair(self.context, user_params=user_params)
        pipeline = Pipeline(
            [Gate(self.processor), pair.user(), self.processor, InstantLLM(), pair.assistant()]
        )
        frames: list = []
        for text in self.said(turns):
            frames += [user_turn(text), SleepFrame(sleep=gap)]
        frames.append(WaitForSummaries())
        await run_test(pipeline, frames_to_send=frames, start_timeout=60)


def processor_kb(summarizer: OpenAISummarizer, n: int = 200) -> float:
    """Memory of one fresh ContextSummarizer (with its LLMContext), averaged over ``n``."""
    gc.collect()
    tracemalloc.start(1)
    base = tracemalloc.get_traced_memory()[0]
    calls = [Call(i, summarizer) for i in range(n)]
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del calls
    return held / n / 1024


async def run_many_calls(
    calls: int = 200,
    turns: int = 6,
    cap: int = 8,
    summary_delay: float = 0.02,
    gap: float = 0.05,
    trace_memory: bool = True,
    per_call_clients: bool = False,
) -> tuple[Figures, list[Call], FakeOpenAIServer]:
    """Run ``calls`` concurrent pipelines through one capped summarizer and measure.

    ``per_call_clients=True`` measures the pattern to avoid instead: one uncapped
    ``OpenAISummarizer`` per call, never closed.

    Returns:
        The figures, the calls (for further checks) and the (stopped) server.
    """
    figures = Figures(calls=calls, turns=turns, cap=cap)
    server = FakeOpenAIServer()

    async def handler(body):
        reply = echo_tokens(body)
        if is_summary_request(body):
            await asyncio.sleep(summary_delay)
        return reply

    server.handler = handler
    await server.start()
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        # 200 pipelines starting at once (under tracemalloc in the benchmark) can hold one
        # loop iteration past the OpenAI client's 5 s connect timeout on a loaded machine (8
        # summaries failed so at -n 6); this measures sharing, not timeouts, so the client
        # waits longer to connect
        client = openai.AsyncOpenAI(
            base_url=server.base_url,
            api_key="not-needed",
            max_retries=0,
            timeout=openai.Timeout(600.0, connect=60.0),
        )
        shared = OpenAISummarizer(model="cheap", client=client, max_concurrency=cap)
        if trace_memory:
            figures.per_processor_kb = processor_kb(shared)
            tracemalloc.start(1)
            base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        if per_call_clients:
            all_calls = [
                Call(i, OpenAISummarizer(base_url=server.base_url, model="cheap"))
                for i in range(calls)
            ]
        else:
            all_calls = [Call(i, shared) for i in range(calls)]
        await asyncio.gather(*(c.run(turns, gap) for c in all_calls))
        figures.seconds = time.perf_counter() - started
        if trace_memory:
            # what the calls hold once they ran: contexts (with their summaries), processors
            # and what the ended pipelines left referenced
            gc.collect()
            snapshot = tracemalloc.take_snapshot()
            held = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.stop()
            ours = snapshot.filter_traces([tracemalloc.Filter(True, "*pipecat_summarizer*")])
            package = sum(stat.size for stat in ours.statistics("filename"))
            figures.per_call_kb = held / calls / 1024
            figures.per_call_package_kb = package / calls / 1024
        figures.connections_during = server.open_connections
        await shared.aclose()  # leaves a given client open: the app closes its own
        await client.close()
        for _ in range(100):  # the server sees the close a few loop turns later
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.02)
        figures.connections_after_close = server.open_connections
        gc.collect()
    figures.resource_warnings = sum(issubclass(w.category, ResourceWarning) for w in caught)
    await server.stop()

    figures.summary_requests = len(server.summary_requests)
    figures.peak_in_flight = server.max_summary_in_flight
    figures.applied = sum(len(c.applied) for c in all_calls)
    figures.failed = sum(len(c.failed) for c in all_calls)
    for body in server.summary_requests:
        owners = {c for c, _ in TOKEN.findall(body["messages"][1]["content"])}
        if len(owners) > 1:
            figures.cross_talk.append(f"one request carried calls {sorted(owners)}")
    for call in all_calls:
        text = "\n".join(str(m.get("content", "")) for m in call.context.messages)
        owners = {int(c) for c, _ in TOKEN.findall(text)}
        if owners - {call.index}:
            figures.cross_talk.append(f"call {call.index} holds calls {sorted(owners)}")
        for t in range(turns):
            if f"c{call.index}t{t}x" not in text:
                figures.lost.append(f"c{call.index}t{t}x")
    return figures, all_calls, server
