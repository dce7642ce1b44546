"""Frame bound: the time a user turn's frame spends in ``ContextSummarizer`` with recall on,
against recall's latency budget, at archive sizes from 1k to 1M.

For each backend (SQLite; PostgreSQL when a server can be started here, as the tests start
one) and each archive size, one caller's archive of ``N`` messages in earlier calls (the
voice-call corpus of benchmarks/recall.py, and as many of another caller's up to 100k) is
built once (SQLite files are cached in ``--cache``, copied before each run so a run never
changes the cached archive). Then one call runs through a real Pipecat pipeline, as
benchmarks/hot_path.py's: ``LLMContextAggregatorPair``, a forwarding processor that notes
when it pushes the frame, ``ContextSummarizer`` with ``RecallParams()`` (the defaults: the
10 ms budget) and the store, a main LLM answering at once, the assistant aggregator. The call
starts with ``--context`` messages already in the context and asks ``--turns`` questions of
the voice corpus (the first is not timed), one after the other.

Per frame:

* wall: from the push into the processor to the end of its ``process_frame`` (the queue hop,
  the counting, recall's wait for the archive, ranking, rendering and placing the block):
  what the frame waits in the processor. The hop (until ``process_frame`` begins) is printed
  apart: recall's budget counts from ``process_frame``.
* CPU: what the machine spent meanwhile: this process's CPU time (the event loop, the SQLite
  store's thread) plus, on PostgreSQL, the CPU time of the store's server backends (their
  ``/proc`` schedstat). On a machine running nothing else the wall time is about this (the
  loop waits for the store, so they hardly overlap); on a loaded machine the wall time also
  holds the time the process waited for a CPU.

Below the table, the slowest 1% of frames per backend and size is split into CPU time (the
loop's, the store thread's, PostgreSQL's backends'; garbage collections apart), the wait for
a CPU while other processes ran, and the rest (benchmarks/_tail.py), beside the p99 without
the waits for a CPU; nothing is left out of the p99s.

Printed per backend and size: frames, wall p50 / p99 / max, the hop's p99, CPU p50 / p99,
the share of frames over the budget, and how recall's searches ended (on time, or missed the
budget: too slow, or the previous turn's search still running), with the load average.

    .venv/bin/python benchmarks/frame_bound.py [--sizes 1000,10000,100000,1000000]
        [--pg-max 100000] [--turns 200] [--context 100] [--cache /tmp/frame_bound]
        [--backends sqlite,postgres] [--no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _tail import Spent, TurnClock, pool_backends, tail_line  # noqa: E402
from frame_delay import InstantLLM, percentile  # noqa: E402
from hot_path import Stamp, TurnEnd, build_messages, describe_code, no_trip_config  # noqa: E402
from loguru import logger  # noqa: E402
from pipecat.frames.frames import Frame, LLMContextFrame, LLMMessagesAppendFrame  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection  # noqa: E402
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402
from recall import CORPUS_VERSION, corpus_questions, fill  # noqa: E402

from pipecat_summarizer import ContextSummarizer, RecallParams  # noqa: E402
from pipecat_summarizer.params import MemoryParams  # noqa: E402
from pipecat_summarizer.store import open_store  # noqa: E402

SIZES = (1000, 10_000, 100_000, 1_000_000)


def _proc_cpu_ns(pids: Sequence[int]) -> int:
    """Nanoseconds the processes ``pids`` have run on a CPU (Linux schedstat)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Clocks:
    """The CPU clock a frame is charged: this process, and the store's server backends."""

    def __init__(self) -> None:
        """This process only, until :attr:`pids` are set."""
        self.pids: list[int] = []

    def cpu_ns(self) -> int:
        """CPU time so far (ns)."""
        return time.process_time_ns() + (_proc_cpu_ns(self.pids) if self.pids else 0)


class CpuStamp(Stamp):
    """The forwarding processor before ours: notes the CPU clock and the counters of
    ``_tail``, then the push time."""

    def __init__(self, clocks: Clocks) -> None:
        """No frame yet."""
        super().__init__()
        self.clocks = clocks
        self.cpu_ns: dict[int, int] = {}
        self.turn_clock: TurnClock | None = None
        self.counters: dict[int, Any] = {}

    async def process_frame(self, frame, direction):
        """Note the clocks and the time (the clocks read before the time: not in it)."""
        if isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM:
            if self.turn_clock is not None:
                self.counters[frame.id] = self.turn_clock.start()
            self.cpu_ns[frame.id] = self.clocks.cpu_ns()
        await super().process_frame(frame, direction)


class TimedSummarizer(ContextSummarizer):
    """Ours, each turn's frame timed from the stamp's push to the end of process_frame."""

    stamp: CpuStamp
    wall_ns: list[int]
    hop_ns: list[int]
    cpu: list[int]
    spent: list[Spent]

    async def process_frame(self, frame, direction):
        """Time the whole ``process_frame`` of a user turn's frame (and its queue hop)."""
        turn = isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM
        started = time.perf_counter_ns()
        await super().process_frame(frame, direction)
        if turn:
            end = time.perf_counter_ns()  # the time first: the CPU clock's read is not in it
            cpu = self.stamp.clocks.cpu_ns()
            pushed = self.stamp.pushed_ns.pop(frame.id)
            self.wall_ns.append(end - pushed)
            self.hop_ns.append(started - pushed)
            self.cpu.append(cpu - self.stamp.cpu_ns.pop(frame.id))
            started = self.stamp.counters.pop(frame.id, None)
            if started is not None and self.stamp.turn_clock is not None:
                spent = self.stamp.turn_clock.stop(started)
                spent.wall = (end - pushed) / 1e6  # the frame's, as the table's
                self.spent.append(spent)


def questions(turns: int, ended: TurnEnd, texts: list[str]) -> Iterator[Frame]:
    """Each question as the caller's turn, the next once the answer is in the context."""
    for turn in range(turns):
        yield LLMMessagesAppendFrame(
            messages=[{"role": "user", "content": texts[turn % len(texts)]}], run_llm=True
        )
        while ended.turns <= turn:
            yield SleepFrame(sleep=0.001)
        yield SleepFrame(sleep=0.05 if turn == 0 else 0.005)


@dataclass
class Row:
    """One backend and size: the timed frames and how recall's searches ended."""

    backend: str
    archived: int
    built: str
    wall_ms: list[float] = field(default_factory=list)
    hop_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    searches: dict[str, int] = field(default_factory=dict)
    spent: list[Spent] = field(default_factory=list)


async def one_call(target: str, backend: str, args: argparse.Namespace, n: int) -> Row:
    """One call of ``args.turns`` questions over the archive at ``target``."""
    rng = random.Random(n)
    row = Row(backend, n, "")
    store = open_store(target)
    turn_clock: TurnClock | None = None
    try:
        clocks = Clocks()
        if backend == "PostgreSQL":
            await store.search("warm", user_id="caller", limit=1, any_word=True)
            clocks.pids = await pool_backends(store)
        context = LLMContext(messages=build_messages(args.context, rng))
        ours = TimedSummarizer(
            context=context,
            config=no_trip_config(),  # nothing is summarized: the frame's recall alone
            summarizer=_NoSummaries(),
            store=store,
            user_id="caller",
            call_id=f"frame-bound-{n}",
            memory=MemoryParams(resume=False),
            recall=RecallParams(),
        )
        stamp = CpuStamp(clocks)
        stamp.turn_clock = turn_clock = TurnClock(clocks.pids)
        ours.stamp, ours.wall_ns, ours.hop_ns, ours.cpu, ours.spent = stamp, [], [], [], []
        pair = LLMContextAggregatorPair(context)
        ended = TurnEnd()
        pipeline = Pipeline([pair.user(), stamp, ours, InstantLLM(), pair.assistant(), ended])
        texts = corpus_questions("voice", rng, args.turns + 1)
        gc.collect()
        gc.freeze()  # the context and the interpreter: collections do not rescan them
        await run_test(
            pipeline,
            frames_to_send=cast(Sequence[Frame], questions(args.turns + 1, ended, texts)),
        )
        step = ours.recall_step
        assert step is not None
        row.wall_ms = [ns / 1e6 for ns in ours.wall_ns[1:]]
        row.hop_ms = [ns / 1e6 for ns in ours.hop_ns[1:]]
        row.cpu_ms = [ns / 1e6 for ns in ours.cpu[1:]]
        row.spent = ours.spent[1:]
        row.searches = {
            "asked": step.turns,
            "recalled": step.recalled,
            "missed": step.missed,
            "late": step.late_served,
        }
    finally:
        if turn_clock is not None:
            turn_clock.close()
        await store.close()
    return row


class _NoSummaries:
    model = "none"

    async def summarize(self, request) -> str:
        raise AssertionError("nothing is summarized here")


async def sqlite_archive(cache: Path, n: int) -> tuple[Path, str]:
    """The cached SQLite archive of ``n`` messages (built once, written aside first)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"recall_voice_v{CORPUS_VERSION}_{n}.db"
    if path.exists():
        return path, "cached"
    partial = Path(f"{path}.partial")
    partial.unlink(missing_ok=True)
    t0 = time.perf_counter()
    store = open_store(str(partial))
    try:
        await fill(store, n, "voice")
    finally:
        await store.close()
    partial.rename(path)
    return path, f"built in {time.perf_counter() - t0:.0f} s"


async def run(args: argparse.Namespace) -> list[Row]:
    """Every backend and size."""
    rows: list[Row] = []
    server = None
    if "postgres" in args.backends:
        try:
            from tests.support.pg_server import PgServer

            server = PgServer()
        except Exception as e:  # noqa: BLE001 (a benchmark: say why and go on)
            print(f"PostgreSQL skipped: {e}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="frame_bound_"))
    try:
        for n in args.sizes:
            if "sqlite" in args.backends:
                path, built = await sqlite_archive(args.cache, n)
                copy = work / "memory.db"
                shutil.copy(path, copy)  # the call's own writes never reach the cache
                row = await one_call(str(copy), "SQLite", args, n)
                row.built = built
                copy.unlink()
                rows.append(row)
                print(_line(row), file=sys.stderr, flush=True)
            if server is not None and n <= args.pg_max:
                dsn = server.create_database(f"frame_bound_{n}")
                t0 = time.perf_counter()
                store = open_store(dsn)
                try:
                    await fill(store, n, "voice")
                finally:
                    await store.close()
                row = await one_call(dsn, "PostgreSQL", args, n)
                row.built = f"built in {time.perf_counter() - t0:.0f} s"
                rows.append(row)
                print(_line(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.destroy()
    return rows


def _line(row: Row) -> str:
    return (
        f"{row.backend} {row.archived:,}: wall p50 {percentile(row.wall_ms, 0.5):.2f} p99 "
        f"{percentile(row.wall_ms, 0.99):.2f} ms, CPU p99 {percentile(row.cpu_ms, 0.99):.2f} ms "
        f"({row.built})"
    )


def table(rows: list[Row], budget_ms: float) -> str:
    """The fixed-width table."""
    head = [
        "backend",
        "archived",
        "frames",
        "wall p50",
        "wall p99",
        "wall max",
        "hop p99",
        "CPU p50",
        "CPU p99",
        f"> {budget_ms:g} ms",
        "on time",
        "missed",
        "archive",
    ]
    body = []
    for r in rows:
        over = sum(w > budget_ms for w in r.wall_ms) / len(r.wall_ms)
        asked = r.searches["asked"]
        body.append(
            [
                r.backend,
                f"{r.archived:,}",
                str(len(r.wall_ms)),
                f"{percentile(r.wall_ms, 0.5):.2f}",
                f"{percentile(r.wall_ms, 0.99):.2f}",
                f"{max(r.wall_ms):.2f}",
                f"{percentile(r.hop_ms, 0.99):.2f}",
                f"{percentile(r.cpu_ms, 0.5):.2f}",
                f"{percentile(r.cpu_ms, 0.99):.2f}",
                f"{over:.1%}",
                f"{asked - r.searches['missed']}/{asked}",
                str(r.searches["missed"]),
                r.built,
            ]
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(x, widths, strict=True)) for x in body]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the frame-bound table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="archive sizes")
    parser.add_argument("--pg-max", type=int, default=100_000, help="largest on PostgreSQL")
    parser.add_argument("--turns", type=int, default=200, help="timed questions per call")
    parser.add_argument("--context", type=int, default=100, help="messages in the context")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/frame_bound"))
    parser.add_argument(
        "--backends", default="sqlite,postgres", help="which backends: sqlite, postgres or both"
    )
    parser.add_argument("--no-postgres", action="store_true", help="the same as --backends sqlite")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.backends = {b.strip().lower() for b in args.backends.split(",") if b.strip()}
    if args.no_postgres:
        args.backends.discard("postgres")
    if not args.backends or not args.backends <= {"sqlite", "postgres"}:
        parser.error("--backends takes sqlite, postgres or both (comma-separated)")
    if args.turns < 1 or args.context < 2:
        parser.error("--turns must be at least 1 and --context at least 2")
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    budget_ms = RecallParams().latency_budget_s * 1000
    print(describe_code())
    print(
        f"the time a user turn's frame spends in ContextSummarizer with RecallParams() "
        f"(budget {budget_ms:g} ms), {args.turns} questions a call, {args.context} messages "
        f"in the context; load average {os.getloadavg()[0]:.2f} at start"
    )
    started = time.monotonic()
    rows = asyncio.run(run(args))
    print(
        "wall: from the push into the processor to the end of its process_frame (hop: the "
        "part before its process_frame began, outside recall's budget); CPU: this process's "
        "CPU time meanwhile, plus the server backends' on PostgreSQL (ms)"
    )
    print(table(rows, budget_ms))
    print(
        "where the slowest frames' time went (ms): CPU of this process (and of PostgreSQL's "
        "backends; garbage collections included), waiting for a CPU (other processes ran), "
        "other (blocked: storage reads, waits on the store); nothing left out"
    )
    for r in rows:
        print(f"{r.backend} {r.archived:,}: {tail_line(r.spent, 99, percentile)}")
    print(
        f"{time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f} at the end "
        f"on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
