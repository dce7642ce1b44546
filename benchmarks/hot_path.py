"""Per-frame cost: ContextSummarizer against a pass-through FrameProcessor, side by side.

What one user turn's ``LLMContextFrame`` costs in ``ContextSummarizer`` (default
``ContextSummarizerParams``, thresholds so large that nothing trips, no store unless
``--store``) and in a pass-through ``FrameProcessor`` whose ``process_frame`` is
``super().process_frame`` plus ``push_frame``, with the context at about 10, 1,000 and 5,000
messages.

Frames travel as in a call, through frame_delay.py's set-up: a real Pipecat pipeline
(``LLMContextAggregatorPair``, the two processors, frame_delay's ``InstantLLM`` answering at
once, the assistant aggregator) run by ``pipecat.tests.utils.run_test``; each turn is an
``LLMMessagesAppendFrame(run_llm=True)``, so between two frames the context grows by one
user message and one assistant message (the cost measured is that of what changed since the
last frame, never a frame on an unchanged context). Both processors sit in the SAME pipeline
and see the same frame one after the other, their order swapped every run (A/B, B/A; with
``--builtin`` three in rotation), so the machine's noise hits both alike. A plain forwarding
processor stands before each, so neither's queue hop holds the other's (or the user
aggregator's) work after its push.

Each run builds a context of ``N - K - 2`` messages (a system prompt, then user and assistant
messages), starts the pipeline and sends ``K + 1`` turns; the first is not timed (ours counts
a context it has not seen once), the ``K`` timed frames see ``N - K + 1`` to ``N + K - 1``
messages (``K`` is ``--turns``, at most ``N // 2 - 1``). Runs repeat until each size has
``--frames`` timed frames per processor.

Two figures per frame, in microseconds:

* process_frame: the processor's whole ``process_frame`` (Pipecat's bookkeeping in
  ``super().process_frame``, our work, the push into the next processor's queue), timed by
  the same thin subclass around both. This is what issue 17's target compares.
* in the pipeline: from the push into the processor (noted by the forwarding processor
  before it) to the end of its ``process_frame``: its two queue hops added, asyncio
  scheduling included, what the frame waits in it.

No observer is added to take these times (frame_delay.py's ``TimeInProcessor`` would run
inside both processors' pushes and add the same few microseconds to each); Pipecat's own
default observer (turn tracking) is there, as in a call.

The garbage collector stays on; the context built before a run is frozen (``gc.freeze``) so
that collections do not rescan it (``--no-gc`` pauses the collector while a pipeline runs).
``--store`` gives ours a SQLite store in a temporary directory (a new call each run);
``--recall`` adds ``RecallParams()`` over ``--archived`` archived messages of the caller's
earlier calls (frame_delay's template; ``--recall`` implies ``--store``). ``--builtin`` adds
a third processor to the rotation: a pass-through that also runs Pipecat's built-in
summarizer's check on each frame (its whole-context token estimate). ``--profile N``, after
the timed runs, profiles ours' ``process_frame`` on ``--profile-frames`` more frames at size
``N`` (cProfile) and prints the library's functions by cumulative and by own time, per frame
(the ``--profile-top`` first of each). benchmarks/frame_bound.py times the frame with recall
against recall's budget at archive sizes from 1k to 1M, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/hot_path.py [--sizes 10,1000,5000] [--frames 800] [--turns 20]
        [--store] [--recall] [--builtin] [--profile 5000] [--profile-top 10] [--no-gc]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from frame_delay import InstantLLM, make_template, percentile  # noqa: E402
from loguru import logger  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    Frame,
    LLMContextAssistantTimestampFrame,
    LLMContextFrame,
    LLMMessagesAppendFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_context_summarizer import (  # noqa: E402
    LLMContextSummarizer,
)
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402
from recall import sentence  # noqa: E402

import pipecat_summarizer  # noqa: E402
from pipecat_summarizer import (  # noqa: E402
    ContextSummarizer,
    LLMAutoContextSummarizationConfig,
    RecallParams,
)
from pipecat_summarizer.store import SQLiteMemoryStore  # noqa: E402

SIZES = (10, 1000, 5000)
OURS, PASS, BUILTIN = "ours", "pass", "built-in"
SYSTEM = {"role": "system", "content": "You are Sage, a nutrition coach. Be brief. " * 10}


class PassThrough(FrameProcessor):
    """The reference: Pipecat's bookkeeping and the push, nothing else."""

    async def process_frame(self, frame, direction):
        """Pass every frame on."""
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


def _is_turn(frame, direction) -> bool:
    return isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM


class Stamp(PassThrough):
    """A forwarding processor that notes when it pushes each context frame on."""

    def __init__(self) -> None:
        """No frame yet."""
        super().__init__()
        self.pushed_ns: dict[int, int] = {}  # frame id -> perf_counter_ns at its push

    async def process_frame(self, frame, direction):
        """Note the time, then pass the frame on."""
        await FrameProcessor.process_frame(self, frame, direction)
        if _is_turn(frame, direction):
            self.pushed_ns[frame.id] = time.perf_counter_ns()
        await self.push_frame(frame, direction)


class TurnEnd(FrameProcessor):
    """The pipeline's last stage: counts finished turns (the assistant aggregator's
    timestamp frame follows the answer into the context)."""

    def __init__(self) -> None:
        """No turn yet."""
        super().__init__()
        self.turns = 0

    async def process_frame(self, frame, direction):
        """Count the turns; pass everything on."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextAssistantTimestampFrame):
            self.turns += 1
        await self.push_frame(frame, direction)


def conversation(
    turns: int, rng: random.Random, ended: TurnEnd, settle_s: float = 0.002, start_s: float = 0.02
) -> Iterator[Frame]:
    """The frames ``run_test`` sends, made as it iterates: each user turn, then 1 ms sleeps
    until the turn is through the pipeline (the answer in the context), then ``settle_s``
    for the processors' background work (``start_s`` after the first, untimed turn: the
    call's start-up work, such as a store's first reads, is not a turn's). No turn overlaps
    the next, whatever a turn costs."""
    for turn in range(turns):
        yield LLMMessagesAppendFrame(
            messages=[{"role": "user", "content": sentence(rng)}], run_llm=True
        )
        while ended.turns <= turn:
            yield SleepFrame(sleep=0.001)
        yield SleepFrame(sleep=start_s if turn == 0 else settle_s)


class Timed:
    """Mixin: times ``process_frame`` on downstream ``LLMContextFrame``s (the same code for
    every processor compared).

    ``samples_ns`` gets one entry per context frame, the untimed first turn included (the
    caller drops it); ``hops_ns`` the time since ``stamp``, the processor before, pushed the
    frame. With ``profiler`` set, the timed frames are also profiled.
    """

    samples_ns: list[int]
    hops_ns: list[int]
    stamp: Stamp
    profiler: cProfile.Profile | None = None

    async def process_frame(self, frame, direction):
        """Time the subclass's whole ``process_frame``."""
        if not _is_turn(frame, direction):
            await super().process_frame(frame, direction)
            return
        profiler = self.profiler if self.samples_ns else None  # not the untimed first frame
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter_ns()
        await super().process_frame(frame, direction)
        t1 = time.perf_counter_ns()
        self.samples_ns.append(t1 - t0)
        self.hops_ns.append(t1 - self.stamp.pushed_ns.pop(frame.id))
        if profiler is not None:
            profiler.disable()


class BuiltinCheck(PassThrough):
    """A pass-through that also runs Pipecat's built-in summarizer's per-response check
    (``LLMContextSummarizer._should_summarize``: its token estimate of the whole context and
    its message count) on each context frame. In a call the built-in runs it inside the
    assistant aggregator, where no public hook reaches; here it runs on the same frames."""

    def __init__(self, context: LLMContext) -> None:
        """Check ``context`` with thresholds that do not trip."""
        super().__init__()
        self._builtin = LLMContextSummarizer(context=context, config=no_trip_config())

    async def process_frame(self, frame, direction):
        """Check, then pass the frame on."""
        await FrameProcessor.process_frame(self, frame, direction)
        if _is_turn(frame, direction):
            self._builtin._should_summarize()
        await self.push_frame(frame, direction)


class TimedSummarizer(Timed, ContextSummarizer):
    """Ours, timed."""


class TimedPassThrough(Timed, PassThrough):
    """The pass-through, timed."""


class TimedBuiltinCheck(Timed, BuiltinCheck):
    """The built-in's check, timed."""


class NoSummaries:
    """A secondary LLM that must not be asked: the thresholds do not trip."""

    model = "none"

    def __init__(self) -> None:
        """No requests yet."""
        self.requests = 0

    async def summarize(self, request) -> str:
        """Count the request (the benchmark reports it: it must stay 0)."""
        self.requests += 1
        return "FACTS:\n- none"


def no_trip_config() -> LLMAutoContextSummarizationConfig:
    """Pipecat's config with thresholds no context here reaches."""
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=10**9, max_unsummarized_messages=10**9
    )


def build_messages(count: int, rng: random.Random) -> list[Any]:
    """A system prompt and ``count - 1`` alternating user and assistant messages."""
    messages = [dict(SYSTEM)]
    for i in range(count - 1):
        if i % 2 == 0:
            messages.append({"role": "user", "content": sentence(rng)})
        else:
            messages.append({"role": "assistant", "content": f"{sentence(rng)} {sentence(rng)}"})
    return messages


@dataclass
class Mode:
    """What ours is given besides the defaults."""

    store: bool = False
    recall: bool = False
    gc: bool = True
    builtin: bool = False  # a third processor: the built-in's check
    template: Path | None = None  # the archive --recall searches
    workdir: Path | None = None


@dataclass
class Samples:
    """Timed frames of one size, per processor (microseconds)."""

    own: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    hop: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    summaries: int = 0
    runs: int = 0
    seconds: float = 0.0


async def one_run(
    size: int,
    turns: int,
    mode: Mode,
    run_index: int,
    into: Samples,
    profiler: cProfile.Profile | None,
) -> None:
    """One pipeline, ``turns + 1`` user turns, the first untimed; samples appended ``into``."""
    rng = random.Random(run_index)
    context = LLMContext(messages=build_messages(max(2, size - turns - 2), rng))
    summarizer = NoSummaries()
    kwargs: dict = {}
    store = None
    if mode.store:
        assert mode.workdir is not None
        path = mode.workdir / f"run{run_index}.db"
        if mode.template is not None:
            shutil.copy(mode.template, path)
        store = SQLiteMemoryStore(path)
        kwargs = {"store": store, "user_id": "caller", "call_id": f"bench-{run_index}"}
        if mode.recall:
            kwargs["recall"] = RecallParams()
    ours = TimedSummarizer(
        context=context, config=no_trip_config(), summarizer=summarizer, **kwargs
    )
    ours.profiler = profiler
    timed_by_name: dict[str, Timed] = {OURS: ours, PASS: TimedPassThrough()}
    if mode.builtin:
        timed_by_name[BUILTIN] = TimedBuiltinCheck(context)
    # the order turns every run (A/B, B/A; with the built-in A/B/C, B/C/A, C/A/B)
    order = list(timed_by_name.values())
    shift = run_index % len(order)
    pair = LLMContextAggregatorPair(context)
    stages: list[FrameProcessor] = [pair.user()]
    for timed in order[shift:] + order[:shift]:
        # a stamp before each: nothing runs after its push, so the next hop is the timed one's
        timed.samples_ns, timed.hops_ns, timed.stamp = [], [], Stamp()
        stages += [timed.stamp, cast(FrameProcessor, timed)]
    ended = TurnEnd()
    pipeline = Pipeline([*stages, InstantLLM(), pair.assistant(), ended])
    # run_test only iterates its frames: a generator paces the turns by the pipeline's pace
    frames = cast(Sequence[Frame], conversation(turns + 1, rng, ended))
    # what is alive now (this run's context, the interpreter, earlier runs' leftovers) moves to
    # the permanent generation: collections while timing do not rescan it, and the next run's
    # collect() is quick (a few MB stay frozen for the process's life)
    gc.collect()
    gc.freeze()
    if not mode.gc:
        gc.disable()
    try:
        await run_test(pipeline, frames_to_send=frames)
    finally:
        gc.enable()
        if store is not None:
            await store.close()
    for name, processor in timed_by_name.items():
        if len(processor.samples_ns) != turns + 1:
            raise RuntimeError(f"{name}: {len(processor.samples_ns)} frames, {turns + 1} turns")
        into.own[name] += [ns / 1000 for ns in processor.samples_ns[1:]]
        into.hop[name] += [ns / 1000 for ns in processor.hops_ns[1:]]
    into.summaries += summarizer.requests


def turns_at(size: int, turns: int) -> int:
    """Timed turns per run at ``size``: the frames stay centred on ``size`` messages."""
    return max(1, min(turns, size // 2 - 1))


async def measure(
    size: int, frames: int, turns: int, mode: Mode, profiler: cProfile.Profile | None
) -> Samples:
    """Runs of ``size`` until ``frames`` timed frames per processor, the order alternating."""
    turns = turns_at(size, turns)
    samples = Samples()
    started = time.monotonic()
    run_index = 0
    while len(samples.own[OURS]) < frames:
        await one_run(size, turns, mode, run_index, samples, profiler)
        run_index += 1
    samples.runs, samples.seconds = run_index, time.monotonic() - started
    return samples


def stats(values: list[float]) -> tuple[float, float]:
    """p50 and p99 by nearest rank."""
    return percentile(values, 0.5), percentile(values, 0.99)


def table(title: str, rows: list[tuple[int, dict[str, list[float]]]]) -> str:
    """One fixed-width block: per size, p50 then p99 of ours and the pass-through with the
    ratio ours/pass-through (and of the built-in's check with its ratio, when measured)."""
    others = [name for name in (OURS, BUILTIN) if name in rows[0][1]]
    head = ["messages"]
    for quantile in ("p50", "p99"):
        for name in others:
            head += [f"{name} {quantile}"]
            head += [f"{PASS} {quantile}", "ratio"] if name == OURS else ["ratio"]
    body = []
    for size, by in rows:
        row = [f"{size:,}"]
        for q in (0, 1):
            reference = stats(by[PASS])[q]
            for name in others:
                value = stats(by[name])[q]
                row.append(f"{value:.1f}")
                if name == OURS:
                    row.append(f"{reference:.1f}")
                row.append(f"{value / reference:.2f}x")
        body.append(row)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [title, "  ".join(c.rjust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)


def profile_report(profiler: cProfile.Profile, size: int, frames: int, top: int = 10) -> str:
    """The library's functions under ours' profiled frames: the ``top`` by cumulative time,
    then the ``top`` by own time, per frame."""
    package = Path(pipecat_summarizer.__file__).parent
    entries: list[tuple[float, float, int, str]] = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in (
        pstats.Stats(profiler).stats.items()  # type: ignore[attr-defined]
    ):
        if filename.startswith(str(package)):
            where = f"{Path(filename).relative_to(package.parent)}:{line}({name})"
            entries.append((cumtime, tottime, ncalls, where))
    lines = [
        f"cProfile of ours' process_frame at {size:,} messages, {frames} frames (a separate "
        "pass, not the timed one); microseconds per frame, inflated by the profiler",
        f"the library's function calls per frame: {sum(e[2] for e in entries) / frames:.0f} "
        f"({len(entries)} distinct functions)",
    ]
    for title, key in (("by cumulative time", 0), ("by own time", 1)):
        lines += ["", f"{title}:", f"{'cum us':>9}{'own us':>9}{'calls/frame':>13}  function"]
        for cumtime, tottime, ncalls, where in sorted(entries, key=itemgetter(key), reverse=True)[
            :top
        ]:
            lines.append(
                f"{cumtime / frames * 1e6:>9.1f}{tottime / frames * 1e6:>9.1f}"
                f"{ncalls / frames:>13.1f}  {where}"
            )
    return "\n".join(lines)


def describe_code() -> str:
    """Which library was measured: its path and commit (and whether the tree differs)."""
    package = Path(pipecat_summarizer.__file__).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "pipecat_summarizer"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        where = f"commit {commit}{' + uncommitted library changes' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        where = "not a git checkout"
    return f"library {package} ({where})"


async def run(args: argparse.Namespace) -> str:
    """Every size; the tables (and the profile)."""
    mode = Mode(
        store=args.store or args.recall,
        recall=args.recall,
        gc=not args.no_gc,
        builtin=args.builtin,
    )
    workdir = Path(tempfile.mkdtemp(prefix="hot_path_")) if mode.store else None
    mode.workdir = workdir
    out = []
    try:
        if mode.recall:
            assert workdir is not None
            mode.template = await make_template(workdir, args.archived)
        own_rows, hop_rows, summaries, runs = [], [], 0, []
        for size in args.sizes:
            samples = await measure(size, args.frames, args.turns, mode, None)
            own_rows.append((size, samples.own))
            hop_rows.append((size, samples.hop))
            summaries += samples.summaries
            runs.append(
                f"{size:,}: {samples.runs} runs of {turns_at(size, args.turns)} turns, "
                f"{samples.seconds:.0f} s"
            )
        out.append(table("process_frame (us): the processor's own work on the frame", own_rows))
        out.append(
            table(
                "in the pipeline (us): from the push into the processor to the end of its "
                "process_frame (its two queue hops included)",
                hop_rows,
            )
        )
        out.append(f"summary requests: {summaries} (0: nothing tripped); " + "; ".join(runs))
        for size in sorted(args.profile):
            profiler = cProfile.Profile()
            samples = await measure(size, args.profile_frames, args.turns, mode, profiler)
            out.append(profile_report(profiler, size, len(samples.own[OURS]), args.profile_top))
        return "\n\n".join(out)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Print the per-frame table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="message counts")
    parser.add_argument("--frames", type=int, default=800, help="timed frames per size")
    parser.add_argument("--turns", type=int, default=20, help="timed turns per pipeline run")
    parser.add_argument("--store", action="store_true", help="ours with a SQLite store")
    parser.add_argument("--recall", action="store_true", help="and RecallParams() (a store)")
    parser.add_argument("--archived", type=int, default=20_000, help="--recall's archive")
    parser.add_argument(
        "--profile", default="", help="comma-separated sizes to profile ours at (cProfile)"
    )
    parser.add_argument("--profile-frames", type=int, default=200, help="frames profiled")
    parser.add_argument("--profile-top", type=int, default=10, help="functions listed")
    parser.add_argument(
        "--builtin", action="store_true", help="also Pipecat's built-in check (a third column)"
    )
    parser.add_argument("--no-gc", action="store_true", help="pause the GC while timing")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.profile = {int(s) for s in args.profile.split(",") if s.strip()}
    if any(size < 4 for size in args.sizes):
        parser.error("--sizes: each size must be at least 4 messages")
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    setup = "no store"
    if args.recall:
        setup = f"SQLite store + RecallParams() over {args.archived:,} archived messages"
    elif args.store:
        setup = "SQLite store, no recall"
    print(describe_code())
    print(
        f"{setup}; {args.frames} timed frames per size and processor, up to {args.turns} "
        f"turns per pipeline; GC {'paused' if args.no_gc else 'on'}; "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    started = time.monotonic()
    print(asyncio.run(run(args)))
    print(f"\n{time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
