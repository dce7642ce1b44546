"""The memory store's costs: write throughput per backend, the hot-path cost a store adds to
each frame, and the flush at ``EndFrame``.

Run: ``.venv/bin/python benchmarks/store.py`` (``--records``, ``--frames``, ``--pg-dsn DSN``;
without a DSN a throwaway PostgreSQL is started from the Debian binaries if present).

* records/s: ``--records`` archived messages (about 200 characters each, as in a voice
  call) submitted to a :class:`StoreWriter` at once and flushed in its 500-record batches,
  one transaction each; on a SQLite file (WAL, ``synchronous=NORMAL``) and on PostgreSQL.
* hot path: ``ContextSummarizer.process_frame(LLMContextFrame)`` on a 100-message context
  whose thresholds do not trip, with and without a store configured (same process, same
  sizes, alternating trials); the difference is what the store adds to each frame. Also
  the cost of ``StoreWriter.submit`` and of archiving one message (once per message that
  leaves the context, not per frame).
* flush at ``EndFrame``: ``CallRecorder.end()`` (final state + flush + writer stop) with 10
  and with 1,000 records waiting.

Times in microseconds unless stated; p50 and p99 over the samples. Garbage collection is
paused in timed regions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loguru import logger
from pipecat.clocks.system_clock import SystemClock
from pipecat.frames.frames import LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.utils.asyncio.task_manager import TaskManager
from pipecat.utils.context.llm_context_summarization import LLMAutoContextSummarizationConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipecat_summarizer import ContextSummarizer  # noqa: E402
from pipecat_summarizer._session.recorder import CallRecorder, MemoryParams  # noqa: E402
from pipecat_summarizer.store import (  # noqa: E402
    SQLiteMemoryStore,
    StoreWriter,
    WriterParams,
    open_store,
)
from pipecat_summarizer.store.records import ArchivedMessage  # noqa: E402

TEXT = (
    "Could you suggest a high-protein vegetarian lunch I can prepare on Sunday for the week? "
    "I train four days a week and I am allergic to peanuts, so nothing with satay please."
)


def _stats(ns: list[int]) -> tuple[float, float]:
    data = sorted(ns)
    return statistics.median(data) / 1000, data[int(0.99 * (len(data) - 1))] / 1000


def _record(i: int, call: str = "bench") -> ArchivedMessage:
    return ArchivedMessage(call, i, "user", f"{TEXT} ({i})", '{"role": "user"}', user_id="u")


async def throughput(target: str, n: int) -> float:
    """Records per second through the writer, sustained over ``n`` records."""
    store = open_store(target)
    await store.open()
    writer = StoreWriter(store, WriterParams(max_queue=n + 1, batch_size=500))
    for i in range(n):
        writer.submit(_record(i))
    t0 = time.perf_counter()
    ok = await writer.flush(timeout=600)
    elapsed = time.perf_counter() - t0
    await store.close()
    assert ok
    return n / elapsed


class _NoSummary:
    async def summarize(self, request):
        raise AssertionError("no summary expected")


def _message(i: int) -> dict:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": TEXT}


async def hot_path(frames: int) -> dict[str, tuple[float, float]]:
    """Per-frame cost with and without a store, and the per-record submit costs."""
    config = LLMAutoContextSummarizationConfig(
        max_context_tokens=10**9, max_unsummarized_messages=10**9
    )
    manager = TaskManager()
    store = SQLiteMemoryStore()
    samples: dict[str, list[int]] = {"without store": [], "with store": []}
    for trial in range(frames // 20):
        for label in ("with store", "without store") if trial % 2 else samples:
            context = LLMContext(messages=[_message(i) for i in range(95)])
            kwargs = {"store": store, "call_id": f"c{trial}"} if label == "with store" else {}
            p = ContextSummarizer(context=context, config=config, summarizer=_NoSummary(), **kwargs)
            await p.setup(
                FrameProcessorSetup(clock=SystemClock(), task_manager=manager, pipeline_worker=None)
            )
            if p._recorder is not None:
                p._recorder.start()
            await p.process_frame(LLMContextFrame(context=context), FrameDirection.DOWNSTREAM)
            gc.collect()
            gc.disable()
            try:
                for i in range(20):
                    context.add_message(_message(i))
                    frame = LLMContextFrame(context=context)
                    t0 = time.perf_counter_ns()
                    await p.process_frame(frame, FrameDirection.DOWNSTREAM)
                    samples[label].append(time.perf_counter_ns() - t0)
            finally:
                gc.enable()
            if p._recorder is not None:
                await p._recorder.end(
                    ended_by="end", summary=None, facts=[], messages_in_context=0, compactions=0
                )
            await p.cleanup()
    await store.close()
    out = {k: _stats(v) for k, v in samples.items()}

    writer = StoreWriter(SQLiteMemoryStore(), WriterParams(max_queue=10**7))
    rec = CallRecorder(SQLiteMemoryStore(), "c")
    record = _record(0)
    submit, archive = [], []
    gc.disable()
    try:
        for i in range(frames):
            t0 = time.perf_counter_ns()
            writer.submit(record)
            t1 = time.perf_counter_ns()
            rec.archive([_message(i)], "summarized", 1)
            archive.append(time.perf_counter_ns() - t1)
            submit.append(t1 - t0)
    finally:
        gc.enable()
    out["StoreWriter.submit (per record)"] = _stats(submit)
    out["archive one message (per message)"] = _stats(archive)
    return out


async def flush_at_end(target: str, queued: int, trials: int) -> tuple[float, float]:
    """``CallRecorder.end()`` with ``queued`` records waiting, in milliseconds."""
    store = open_store(target)
    await store.open()
    samples = []
    for t in range(trials):
        rec = CallRecorder(store, f"end-{queued}-{t}", "u", MemoryParams(resume=False))
        rec.start()
        for i in range(queued):
            rec.writer.submit(_record(i, rec.call_id))
        t0 = time.perf_counter_ns()
        ok = await rec.end(
            ended_by="end", summary="s", facts=[], messages_in_context=10, compactions=1
        )
        samples.append(time.perf_counter_ns() - t0)
        assert ok
    await store.close()
    p50, p99 = _stats(samples)
    return p50 / 1000, p99 / 1000


async def run(args) -> str:
    lines = []
    server = None
    targets = {}
    with tempfile.TemporaryDirectory() as tmp:
        targets["SQLite (file, WAL)"] = str(Path(tmp) / "bench.db")
        if args.pg_dsn:
            targets["PostgreSQL"] = args.pg_dsn
        else:
            try:
                from tests.support.pg_server import PgServer

                server = PgServer()
                targets["PostgreSQL"] = server.create_database("bench")
            except Exception as e:  # noqa: BLE001 - reported, the rest still runs
                lines.append(f"(PostgreSQL not measured: {e})")
        try:
            lines.append(f"Write throughput ({args.records:,} archived messages, 500 per batch):")
            for name, target in targets.items():
                rate = await throughput(target, args.records)
                lines.append(f"  {name:<20} {rate:>10,.0f} records/s")
            lines.append("")
            lines.append(f"Hot path (process_frame, 100-message context, {args.frames} frames):")
            for name, (p50, p99) in (await hot_path(args.frames)).items():
                lines.append(f"  {name:<36} p50 {p50:7.2f} us   p99 {p99:7.2f} us")
            lines.append("")
            lines.append("Flush at EndFrame (CallRecorder.end: final state + flush), ms:")
            for name, target in targets.items():
                for queued in (10, 1000):
                    p50, p99 = await flush_at_end(target, queued, args.trials)
                    lines.append(
                        f"  {name:<20} {queued:>5} queued   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms"
                    )
        finally:
            if server is not None:
                server.destroy()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the store's figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--frames", type=int, default=2_000)
    parser.add_argument("--trials", type=int, default=20, help="flushes timed per case")
    parser.add_argument("--pg-dsn", help="an existing PostgreSQL database to measure")
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    print(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
