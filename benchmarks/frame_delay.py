"""Frame delay: how long each user turn's ``LLMContextFrame`` spends in ``ContextSummarizer``.

A real Pipecat pipeline (``LLMContextAggregatorPair``, the processor, a main LLM that answers
at once, the assistant aggregator) runs a call of user turns; a pipeline observer takes the
pipeline clock's time when the user aggregator pushes the turn's frame to the processor and
when the processor pushes it on (its queue, its per-turn work and recall's wait included).
Four set-ups: no store; a SQLite store without recall; the store with lexical recall over
20,000 archived messages of the caller's earlier calls (``RecallParams()``, 10 ms budget);
the same with ``RecallParams.broad()``. Prints p50 and p99 (ms) per set-up, each the median
over ``--runs`` runs, and the p99 lateness of a 1 ms sleep on the same loop meanwhile (a
loaded machine, or a thread holding the GIL, delays every frame by about that much).

    .venv/bin/python benchmarks/frame_delay.py [--turns 60] [--runs 3] [--archived 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from loguru import logger  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402
from recall import WORDS, fill, sentence  # noqa: E402

from pipecat_summarizer import ContextSummarizer  # noqa: E402
from pipecat_summarizer._session.recorder import MemoryParams  # noqa: E402
from pipecat_summarizer.params import RecallParams  # noqa: E402
from pipecat_summarizer.store import SQLiteMemoryStore  # noqa: E402

SETUPS = ("no store", "store, no recall", "store + recall", "store + recall (broad)")


class InstantLLM(FrameProcessor):
    """The main LLM: answers each context frame at once with one short sentence."""

    async def process_frame(self, frame, direction):
        """Answer context frames; pass everything on."""
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM:
            await self.push_frame(LLMFullResponseStartFrame())
            await self.push_frame(LLMTextFrame("Sure, noted."))
            await self.push_frame(LLMFullResponseEndFrame())


class QuickSummarizer:
    """A secondary LLM that answers at once (summaries run in the background anyway)."""

    model = "quick"

    async def summarize(self, request) -> str:
        """A fixed record."""
        return "FACTS:\n- the caller talked about plans\nDECISIONS:\n- none"


class TimeInProcessor(BaseObserver):
    """The pipeline clock's time each LLMContextFrame enters and leaves one processor."""

    def __init__(self, processor: FrameProcessor):
        """Watch ``processor``."""
        super().__init__()
        self._processor = processor
        self._entered: dict[int, int] = {}
        self.delays_ms: list[float] = []

    async def on_push_frame(self, data: FramePushed):
        """Record arrivals and departures of downstream context frames."""
        frame = data.frame
        if not isinstance(frame, LLMContextFrame) or data.direction != FrameDirection.DOWNSTREAM:
            return
        if data.destination is self._processor:
            self._entered[frame.id] = data.timestamp
        elif data.source is self._processor and frame.id in self._entered:
            self.delays_ms.append((data.timestamp - self._entered.pop(frame.id)) / 1e6)


async def _loop_lag(lags: list[float]) -> None:
    # how late a 1 ms sleep wakes: the machine's (and the loop's) share in the delays
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(0.001)
        lags.append((loop.time() - t - 0.001) * 1000)


async def one_run(
    setup: str, template: Path | None, turns: int, seed: int
) -> tuple[list[float], list[float]]:
    """One call of ``turns`` user turns; the frame delays and the loop's lateness in ms."""
    rng = random.Random(seed)
    store = None
    workdir = None
    kwargs: dict = {}
    if setup != "no store":
        workdir = Path(tempfile.mkdtemp(prefix="frame_delay_"))
        path = workdir / "memory.db"
        assert template is not None
        shutil.copy(template, path)
        store = SQLiteMemoryStore(path)
        kwargs = {
            "store": store,
            "user_id": "caller",
            "call_id": f"bench-{seed}",
            "memory": MemoryParams(resume=False),
        }
        if setup == "store + recall":
            kwargs["recall"] = RecallParams()
        elif setup == "store + recall (broad)":
            kwargs["recall"] = RecallParams.broad()
    context = LLMContext(messages=[{"role": "system", "content": "You are a helpful assistant."}])
    processor = ContextSummarizer(context=context, summarizer=QuickSummarizer(), **kwargs)
    observer = TimeInProcessor(processor)
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline([pair.user(), processor, InstantLLM(), pair.assistant()])
    frames: list = []
    for i in range(turns):
        text = f"What was the {' '.join(rng.sample(WORDS, 3))} again?" if i % 2 else sentence(rng)
        frames.append(
            LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True)
        )
        frames.append(SleepFrame(sleep=0.03))
    lags: list[float] = []
    watcher = asyncio.create_task(_loop_lag(lags))
    try:
        await run_test(pipeline, frames_to_send=frames, observers=[observer])
    finally:
        watcher.cancel()
        if store is not None:
            await store.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return observer.delays_ms, lags


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def make_template(directory: Path, archived: int) -> Path:
    """A store holding ``archived`` messages of the caller's earlier calls (and as many of
    another caller's)."""
    path = directory / "template.db"
    store = SQLiteMemoryStore(path)
    try:
        await fill(store, archived, random.Random(7))
    finally:
        await store.close()
    return path


async def run(turns: int, runs: int, archived: int, setups: tuple[str, ...]) -> str:
    """Every set-up ``runs`` times; the table."""
    directory = Path(tempfile.mkdtemp(prefix="frame_delay_template_"))
    try:
        template = await make_template(directory, archived)
        lines = [
            f"frame delay in the processor, {turns} turns a call, median of {runs} runs "
            f"({archived:,} archived messages)",
            f"{'set-up':<26}{'p50 ms':>9}{'p99 ms':>9}{'loop lag p99 ms':>17}",
        ]
        for setup in setups:
            p50s, p99s, lag99s = [], [], []
            for r in range(runs):
                delays, lags = await one_run(setup, template, turns, seed=r)
                p50s.append(percentile(delays, 0.5))
                p99s.append(percentile(delays, 0.99))
                lag99s.append(percentile(lags, 0.99))
            lines.append(
                f"{setup:<26}{statistics.median(p50s):>9.2f}{statistics.median(p99s):>9.2f}"
                f"{statistics.median(lag99s):>17.2f}"
            )
        return "\n".join(lines)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--archived", type=int, default=20_000)
    parser.add_argument("--setup", choices=SETUPS, action="append", help="only these set-ups")
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    print(asyncio.run(run(args.turns, args.runs, args.archived, tuple(args.setup or SETUPS))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
