"""Per-context-frame cost: ContextSummarizer versus Pipecat's built-in token estimate.

Run: ``.venv/bin/python benchmarks/hot_path.py`` (``--trials``, ``--appends``, ``--sizes``).

For each context size N, each trial builds a fresh context (a system prompt and N - 5
conversation messages), processes one untimed frame (ours counts the context once), then
grows it by appends as in a real call (user and assistant messages alternately) up to N
messages, processing one ``LLMContextFrame`` after every append:

* ours: ``ContextSummarizer.process_frame(LLMContextFrame, DOWNSTREAM)``, the whole
  processor (``super().process_frame`` and ``push_frame`` included; the processor is set up
  but not linked, so pushing costs what pushing to nothing costs), with thresholds that do
  not trip (the work every turn pays);
* built-in estimate: ``LLMContextSummarizationUtil.estimate_context_tokens(context)``, what
  Pipecat's summarizer computes on every ``LLMFullResponseStartFrame``;
* built-in check: ``LLMContextSummarizer._should_summarize()``, the estimate plus its
  message count and logging.

Each timed frame is measured with ``time.perf_counter_ns`` with the garbage collector
paused (a collection in a timed region measures the collector, not this code). Times are
in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time

from loguru import logger
from pipecat.clocks.system_clock import SystemClock
from pipecat.frames.frames import LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_context_summarizer import LLMContextSummarizer
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.utils.asyncio.task_manager import TaskManager
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummarizationUtil,
)

from pipecat_summarizer import ContextSummarizer

SIZES = (10, 100, 1000, 5000)
USER = "Could you suggest a high-protein vegetarian lunch I can prepare on Sunday for the week?"
ASSISTANT = (
    "Sure. A chickpea and quinoa salad keeps for four days in the fridge and gives you about "
    "twenty grams of protein per portion. Add feta or a boiled egg for a little more, and keep "
    "the dressing separate so it stays crisp."
)


class _NoSummary:
    async def summarize(self, request):  # never called: the thresholds do not trip
        raise AssertionError("no summary expected")


def _message(i: int) -> dict:
    return (
        {"role": "user", "content": USER}
        if i % 2 == 0
        else {
            "role": "assistant",
            "content": ASSISTANT,
        }
    )


def _config() -> LLMAutoContextSummarizationConfig:
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=10**9, max_unsummarized_messages=10**9
    )


def _stats(samples_ns: list[int]) -> tuple[float, float]:
    data = sorted(samples_ns)
    p50 = statistics.median(data) / 1000
    p99 = data[min(len(data) - 1, int(round(0.99 * (len(data) - 1))))] / 1000
    return p50, p99


async def measure(size: int, trials: int, appends: int) -> dict[str, tuple[float, float]]:
    """Time the three operations at one context size.

    Each trial builds a context of ``size - appends`` messages, lets ours do its one full
    count on a first (untimed) frame, then appends ``appends`` messages one at a time and
    times the frame after each, so every timed frame sees ``size - appends + 1`` to
    ``size`` messages and ours works incrementally, as in a call.
    """
    system = {"role": "system", "content": "You are Sage, a nutrition coach. " * 20}
    start = max(0, size - appends)
    ours_ns: list[int] = []
    estimate_ns: list[int] = []
    check_ns: list[int] = []
    task_manager = TaskManager()
    for _ in range(trials):
        context = LLMContext(messages=[system] + [_message(i) for i in range(start)])
        ours = ContextSummarizer(context=context, config=_config(), summarizer=_NoSummary())
        await ours.setup(
            FrameProcessorSetup(
                clock=SystemClock(), task_manager=task_manager, pipeline_worker=None
            )
        )
        await ours.process_frame(LLMContextFrame(context=context), FrameDirection.DOWNSTREAM)
        gc.collect()
        gc.disable()
        try:
            for i in range(start, size):
                context.add_message(_message(i))
                frame = LLMContextFrame(context=context)
                t0 = time.perf_counter_ns()
                await ours.process_frame(frame, FrameDirection.DOWNSTREAM)
                ours_ns.append(time.perf_counter_ns() - t0)
        finally:
            gc.enable()
        # The built-in on the same sizes, in its own loop (interleaving the two would let
        # the 5,000-message scan evict the caches ours then runs on).
        context = LLMContext(messages=[system] + [_message(i) for i in range(start)])
        builtin = LLMContextSummarizer(context=context, config=_config())
        gc.collect()
        gc.disable()
        try:
            for i in range(start, size):
                context.add_message(_message(i))
                t0 = time.perf_counter_ns()
                LLMContextSummarizationUtil.estimate_context_tokens(context)
                t1 = time.perf_counter_ns()
                builtin._should_summarize()
                check_ns.append(time.perf_counter_ns() - t1)
                estimate_ns.append(t1 - t0)
        finally:
            gc.enable()
        await ours.cleanup()
    return {
        "ours": _stats(ours_ns),
        "estimate": _stats(estimate_ns),
        "check": _stats(check_ns),
    }


# Pipecat's own measurement of estimate_context_tokens (p50, us), for scale.
PIPECAT_REFERENCE_US = {10: 2, 100: 20, 1000: 200, 5000: 1009}


def format_rows(rows: list[tuple[int, dict[str, tuple[float, float]]]]) -> str:
    """The results as a fixed-width table."""
    head = (
        "messages",
        "ours p50",
        "ours p99",
        "built-in estimate p50",
        "p99",
        "built-in check p50",
        "p99",
    )
    body = [
        (
            f"{size:,}",
            f"{r['ours'][0]:.1f}",
            f"{r['ours'][1]:.1f}",
            f"{r['estimate'][0]:.1f}",
            f"{r['estimate'][1]:.1f}",
            f"{r['check'][0]:.1f}",
            f"{r['check'][1]:.1f}",
        )
        for size, r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in body]
    scale = [
        r["estimate"][0] / PIPECAT_REFERENCE_US[size]
        for size, r in rows
        if size in PIPECAT_REFERENCE_US
    ]
    if scale:
        lines.append(
            "\nThis machine runs the built-in estimate "
            f"{statistics.median(scale):.1f}x slower than Pipecat's reference figures "
            "(2 / 20 / 200 / 1,009 us at 10 / 100 / 1,000 / 5,000 messages)."
        )
    return "\n".join(lines)


async def run(sizes: list[int], trials: int, appends: int) -> str:
    """Measure every size and return the table."""
    rows = [(size, await measure(size, trials, appends)) for size in sizes]
    return format_rows(rows)


def main(argv: list[str] | None = None) -> int:
    """Print the hot-path table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="fresh contexts per size")
    parser.add_argument("--appends", type=int, default=5, help="timed appends per trial")
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="comma-separated message counts"
    )
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    gc.freeze()  # keep the interpreter's own objects out of the collections between trials
    print(
        f"Per-context-frame time in microseconds: {args.trials} x {args.appends} frames per "
        "size, context growing by appends, GC paused while timing\n"
    )
    print(asyncio.run(run(sizes, args.trials, args.appends)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
