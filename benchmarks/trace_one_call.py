"""One bundled call, traced: the spans of its conversation as an indented tree.

Replays a call shipped with the package (``orders_call`` by default: bulky tool results, so
clearing shows) offline through a real Pipecat pipeline run by a ``PipelineWorker`` with
``enable_tracing=True``: ``LLMContextAggregatorPair``, ``ContextSummarizer`` (the offline
``ExtractiveSummarizer``, a temporary SQLite store, per-turn recall, tool-result clearing), and
the replay's ``ReplayLLM`` answering with the recording. Each turn is spoken as in a call
(``UserStartedSpeakingFrame``, the user message, the answer, ``BotStarted/StoppedSpeaking``),
so Pipecat's turn tracker opens one ``turn`` span per exchange.

Spans go to OpenTelemetry's ``InMemorySpanExporter`` and are printed as a tree: name,
duration and attributes (ours in full: numbers and ids only; Pipecat's own spans: numbers,
booleans and ids). ``--no-attributes`` prints names and durations only.

    .venv/bin/python benchmarks/trace_one_call.py [--call orders_call] [--turns N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    LLMMessagesAppendFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import WorkerRunner
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer import ContextSummarizer
from pipecat_summarizer.params import (
    ClearingParams,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    WriterParams,
)
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.summarizers import ExtractiveSummarizer
from pipecat_summarizer.tracing import TRACER_NAME
from pipecat_summarizer_cli.replay.bundled import bundled_conversations
from pipecat_summarizer_cli.replay.replay_llm import ReplayLLM
from pipecat_summarizer_cli.replay.transcript import context_messages, load_transcript

CONVERSATION = "trace-one-call"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call", default="orders_call", help="a bundled call's name")
    parser.add_argument("--turns", type=int, default=None, help="replay the first N turns")
    parser.add_argument("--max-messages", type=int, default=16, help="max_unsummarized_messages")
    parser.add_argument("--keep", type=int, default=10, help="min_messages_after_summary")
    parser.add_argument("--no-attributes", action="store_true", help="names and durations only")
    return parser.parse_args()


async def replay(args: argparse.Namespace, store_dir: Path) -> ContextSummarizer:
    """Replay the call through a traced pipeline."""
    calls = bundled_conversations()
    if args.call not in calls:
        raise SystemExit(f"--call must be one of {', '.join(calls)}; got {args.call!r}")
    transcript = load_transcript(calls[args.call].transcript)
    turns = transcript.turns[: args.turns] if args.turns else transcript.turns
    answered: asyncio.Queue[int] = asyncio.Queue()
    llm = ReplayLLM([t.steps for t in turns], on_turn_answered=answered.put_nowait)
    context = LLMContext(messages=context_messages(transcript.preamble))
    store = SQLiteMemoryStore(store_dir / "memory.db")
    processor = ContextSummarizer(
        context=context,
        config=LLMAutoContextSummarizationConfig(
            max_context_tokens=None,
            max_unsummarized_messages=args.max_messages,
            summary_config=LLMContextSummaryConfig(min_messages_after_summary=args.keep),
        ),
        summarizer=ExtractiveSummarizer(),
        params=ContextSummarizerParams(
            clearing=ClearingParams(keep_latest=1, min_result_tokens=60, min_freed_tokens=100)
        ),
        store=store,
        call_id="orders-1",
        user_id="caller-1",
        memory=MemoryParams(writer=WriterParams(flush_interval_s=0.05)),
        recall=RecallParams(),
    )
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline([pair.user(), processor, llm, processor.after_llm(), pair.assistant()])
    worker = PipelineWorker(
        pipeline, enable_tracing=True, conversation_id=CONVERSATION, cancel_on_idle_timeout=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_worker: Any, _frame: Any) -> None:
        started.set()

    async def drive() -> None:
        await asyncio.wait_for(started.wait(), timeout=10)
        for turn in turns:
            llm.begin_turn(turn.index)
            await worker.queue_frame(UserStartedSpeakingFrame())
            await worker.queue_frame(UserStoppedSpeakingFrame())
            await worker.queue_frame(
                LLMMessagesAppendFrame(messages=context_messages(turn.inputs), run_llm=True)
            )
            while await asyncio.wait_for(answered.get(), timeout=10) != turn.index:
                pass
            await asyncio.sleep(0.05)  # the assistant aggregator adds the answer
            await worker.queue_frame(BotStartedSpeakingFrame())
            await worker.queue_frame(BotStoppedSpeakingFrame())
        await asyncio.sleep(0.3)  # the last summary lands
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner()
    await runner.add_workers(worker)
    try:
        await asyncio.gather(runner.run(), drive())
    finally:
        await store.close()
    return processor


def _shown(span: ReadableSpan) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    if span.instrumentation_scope is not None and span.instrumentation_scope.name == TRACER_NAME:
        return attributes  # ours: numbers and ids only, by construction
    # Pipecat's own spans: numbers, booleans and ids (its service spans may carry text)
    return {
        k: v
        for k, v in attributes.items()
        if isinstance(v, bool | int | float) or k.endswith((".id", ".type"))
    }


def print_tree(spans: tuple[ReadableSpan, ...], *, attributes: bool) -> None:
    """Each span under its parent, by start time: name, duration, attributes."""
    ids = {s.context.span_id for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)

    def show(span: ReadableSpan, depth: int) -> None:
        ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        status = " ERROR" if span.status.status_code == trace.StatusCode.ERROR else ""
        print(f"{'  ' * depth}{span.name}  {ms:.1f} ms{status}")
        if attributes:
            for key, value in sorted(_shown(span).items()):
                if isinstance(value, float):
                    value = round(value, 4)
                print(f"{'  ' * depth}    {key} = {value}")
        for child in sorted(children.get(span.context.span_id, []), key=lambda c: c.start_time):
            show(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: s.start_time or 0):
        show(root, 0)


def main() -> None:
    args = _arguments()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(replay(args, Path(tmp)))
    spans = exporter.get_finished_spans()
    print_tree(spans, attributes=not args.no_attributes)
    ours: dict[str, int] = {}
    for s in spans:
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == TRACER_NAME:
            ours[s.name] = ours.get(s.name, 0) + 1
    print(f"\n{len(spans)} spans; ours: " + ", ".join(f"{k} x{v}" for k, v in sorted(ours.items())))


if __name__ == "__main__":
    main()
