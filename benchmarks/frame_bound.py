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

Each size runs twice. With prefetch (``--no-prefetch`` leaves it out), a ``RecallPrefetch``
before the user aggregator gets the caller's words as a speech-to-text service delivers
them, before the turn ends (benchmarks/_spoken.py: interim transcriptions, ``--lead-ms``
before the final one and the turn's end, as the ``questions`` replay's --spoken-lead-ms):
its early search, and the block it chooses and renders, serve the turn when they are done
on the turn's own words. Without prefetch, each question is appended to the context as a
message and the search starts when the turn's frame arrives (the figures before prefetch).

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

Below the table, per backend, size and mode, the slowest 1% of frames are split by phase
(benchmarks/_phases.py: counting, the search, the extra searches, choosing, rendering,
placing the block, the forget watch, writing the context, pushing the frame on); every
frame over the budget, by the time each phase ran past it and the phase it crossed it in;
with prefetch, the p99 of the turns the early block served and of the others. Then the
slowest 1% are split into CPU time (the loop's, the store thread's, PostgreSQL's backends';
garbage collections apart), the wait for a CPU while other processes ran, and the rest
(benchmarks/_tail.py), beside the p99 without the waits for a CPU; nothing is left out of
the p99s.

Printed per backend and size: frames, wall p50 / p99 / max, the hop's p99, CPU p50 / p99,
the share of frames over the budget, and how recall's searches ended (on time, or missed the
budget: too slow, or the previous turn's search still running), with prefetch the share
of timed turns whose search an early one answered and whose block was the early one (chosen
and rendered before the turn), with the load average.

    .venv/bin/python benchmarks/frame_bound.py [--sizes 1000,10000,100000,1000000]
        [--pg-max 100000] [--turns 200] [--context 100] [--cache /tmp/frame_bound]
        [--backends sqlite,postgres] [--no-postgres] [--no-prefetch] [--only-prefetch]
        [--lead-ms 200] [--word-ms 100] [--raw-interims] [--cpu-phases] [--trips]
        [--no-settle] [--other-writes N]

``--cpu-phases`` also prints each phase's CPU time, the loop's and the store's (the SQLite
store's thread, PostgreSQL's backends) (benchmarks/_cpu_phases.py): what a frame's CPU is spent
on, not moved between threads. Below the table, per row: the extra searches (the gathered
words', the stated values') the turns let go past the deadline, those not started because
they were not expected to answer in time, and the turns whose stated values' searches (a
later correction's) answered in time.

``--trips`` splits the slowest frames' store trips (benchmarks/_phases.py's ``StoreTrips``):
the turn's own search queued (for SQLite's one thread, behind which trips; or a connection of
PostgreSQL's pool), run (with the store's CPU: the thread's, the backend's), handed back to the
loop; the other trips meanwhile; the step's waits that timed out and how late they resumed
(with the store running a trip, or idle); and every trip of the call by kind (the store's CPU
p50 / p90 / p99: the search's cost whatever the machine's load). The tail lines also give the
machine during the frames: other processes' CPU, the hypervisor's steal (not a thread's CPU nor
its wait for a CPU here: bugs S15-F-1), PostgreSQL's background processes. The archive is
timed as a deployed store has it (SQLite's copy written back first; PostgreSQL's archive
vacuumed, analyzed and checkpointed after its build; ``--no-settle``: right after the copy and
the build, as before); ``--other-writes N`` times it with other calls archiving N messages a
second into the same store meanwhile (bugs S15-F-2).
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
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _cpu_phases import CpuPhases, cpu_phases_lines  # noqa: E402
from _frame_report import Row, line, report  # noqa: E402
from _phases import FrameTrips, PhaseClock, StoreTrips  # noqa: E402
from _settle import vacuumed  # noqa: E402
from _spoken import spoken_turn  # noqa: E402
from _tail import LoopSteps, ServerProcesses, Spent, Step, TurnClock, pool_backends  # noqa: E402
from frame_delay import InstantLLM  # noqa: E402
from hot_path import Stamp, TurnEnd, build_messages, describe_code, no_trip_config  # noqa: E402
from loguru import logger  # noqa: E402
from pipecat.frames.frames import Frame, LLMContextFrame, LLMMessagesAppendFrame  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection  # noqa: E402
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies  # noqa: E402
from recall import CORPUS_VERSION, corpus_questions, fill, sentence  # noqa: E402

from pipecat_summarizer import ContextSummarizer, RecallParams, RecallPrefetch  # noqa: E402
from pipecat_summarizer.params import MemoryParams  # noqa: E402
from pipecat_summarizer.store import open_store  # noqa: E402
from pipecat_summarizer.store.records import ArchivedMessage  # noqa: E402

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
    phases: PhaseClock
    cpu_phases: CpuPhases | None
    loop_steps: LoopSteps
    #: per timed frame: the loop steps longer than LoopSteps' threshold during it
    steps: list[list[Step]]
    #: per timed frame: an early search (RecallPrefetch's) answered the turn's; the early
    #: block (chosen and rendered before the turn) was placed
    early: list[tuple[bool, bool]]
    #: with --trips: the store's trips and the step's timed waits, and per timed frame those
    #: that overlap it
    trips: StoreTrips | None
    frame_trips: list[FrameTrips]

    async def process_frame(self, frame, direction):
        """Time the whole ``process_frame`` of a user turn's frame (and its queue hop)."""
        turn = isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM
        started = time.perf_counter_ns()
        step = self.recall_step
        blocks, served = _early_counts(step)
        if turn:
            self.phases.begin(self.stamp.pushed_ns[frame.id], started)
            if self.cpu_phases is not None:
                self.cpu_phases.begin()
        await super().process_frame(frame, direction)
        if turn:
            end = time.perf_counter_ns()  # the time first: the CPU clock's read is not in it
            cpu = self.stamp.clocks.cpu_ns()
            if self.cpu_phases is not None:
                self.cpu_phases.end()
            self.phases.end(end)
            blocks_now, served_now = _early_counts(step)
            self.early.append((served_now > served, blocks_now > blocks))
            pushed = self.stamp.pushed_ns.pop(frame.id)
            self.steps.append(self.loop_steps.within(pushed / 1e9, end / 1e9))
            if self.trips is not None:
                self.frame_trips.append(self.trips.within(pushed / 1e9, end / 1e9))
            self.wall_ns.append(end - pushed)
            self.hop_ns.append(started - pushed)
            self.cpu.append(cpu - self.stamp.cpu_ns.pop(frame.id))
            started = self.stamp.counters.pop(frame.id, None)
            if started is not None and self.stamp.turn_clock is not None:
                spent = self.stamp.turn_clock.stop(started)
                spent.wall = (end - pushed) / 1e6  # the frame's, as the table's
                self.spent.append(spent)

    async def push_frame(self, frame, direction=FrameDirection.DOWNSTREAM):
        """Push on; the timed frame's push is a phase of its own."""
        if not self.phases.timing:
            await super().push_frame(frame, direction)
            return
        started = time.perf_counter()
        await super().push_frame(frame, direction)
        self.phases.push(started)


def _count_let_go(step: Any) -> list[int]:
    """Count the extra searches (the gathered words', the stated values') the step lets go
    (``ArchiveSearch._let_go``: they ran past the turn's deadline), in ``[0]``, and the turns
    whose stated values' searches answered in time, in ``[1]``."""
    counted = [0, 0]
    if step is None:
        return counted
    let_go, later = step._let_go, step._later

    def counting(task: Any) -> None:
        counted[0] += not task.done()
        let_go(task)

    async def answered(*args: Any, **kwargs: Any) -> Any:
        # the values' searches find at least the hit that states the value: no hits, no
        # answer in time (or no value stated)
        found = await later(*args, **kwargs)
        counted[1] += bool(found)
        return found

    step._let_go, step._later = counting, answered
    return counted


def _early_counts(step: Any) -> tuple[int, int]:
    """The step's early blocks placed, and its searches an early one answered."""
    if step is None:
        return 0, 0
    early = step.early_searches
    return step.early_blocks, getattr(early, "served", 0) if early is not None else 0


def questions(turns: int, ended: TurnEnd, texts: list[str]) -> Iterator[Frame]:
    """Each question as the caller's turn, the next once the answer is in the context."""
    for turn in range(turns):
        yield LLMMessagesAppendFrame(
            messages=[{"role": "user", "content": texts[turn % len(texts)]}], run_llm=True
        )
        while ended.turns <= turn:
            yield SleepFrame(sleep=0.001)
        yield SleepFrame(sleep=0.05 if turn == 0 else 0.005)


def spoken_questions(
    turns: int, ended: TurnEnd, texts: list[str], user: Any, args: argparse.Namespace
) -> Iterator[Frame]:
    """Each question spoken (benchmarks/_spoken.py), the next once the answer is in the
    context."""
    for turn in range(turns):
        held = lambda: bool(user.aggregation_string())  # noqa: E731
        yield from spoken_turn(
            texts[turn % len(texts)],
            held,
            word_s=args.word_ms / 1000,
            lead_s=args.lead_ms / 1000,
            raw=args.raw_interims,
        )
        while ended.turns <= turn:
            yield SleepFrame(sleep=0.001)
        yield SleepFrame(sleep=0.05 if turn == 0 else 0.005)


async def one_call(
    target: str, backend: str, args: argparse.Namespace, n: int, prefetch: bool
) -> Row:
    """One call of ``args.turns`` questions over the archive at ``target`` (``prefetch``:
    spoken, with ``RecallPrefetch`` before the user aggregator)."""
    rng = random.Random(n)
    row = Row(backend, n, "", prefetch)
    store = open_store(target)
    turn_clock: TurnClock | None = None
    loop_steps = LoopSteps()
    trips: StoreTrips | None = None
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
        postmaster = getattr(args, "postmaster", None)
        server = None if postmaster is None else ServerProcesses(postmaster, clocks.pids)
        stamp.turn_clock = turn_clock = TurnClock(clocks.pids, server)
        ours.stamp, ours.wall_ns, ours.hop_ns, ours.cpu, ours.spent = stamp, [], [], [], []
        ours.phases, ours.early = PhaseClock(ours), []
        ours.cpu_phases = CpuPhases(ours, clocks.pids) if args.cpu_phases else None
        extras = _count_let_go(ours.recall_step)
        ours.loop_steps, ours.steps = loop_steps, []
        ours.trips = trips = StoreTrips(store) if args.trips else None
        ours.frame_trips = []
        loop_steps.install()
        turns = ExternalUserTurnStrategies()  # with prefetch, the STT's frames end the turns
        pair = LLMContextAggregatorPair(
            context,
            user_params=LLMUserAggregatorParams(user_turn_strategies=turns) if prefetch else None,
        )
        ended = TurnEnd()
        user = pair.user()
        head = [RecallPrefetch(ours)] if prefetch else []
        stages = [*head, user, stamp, ours, InstantLLM(), pair.assistant(), ended]
        texts = corpus_questions("voice", rng, args.turns + 1)
        frames = (
            spoken_questions(args.turns + 1, ended, texts, user, args)
            if prefetch
            else questions(args.turns + 1, ended, texts)
        )
        gc.collect()
        gc.freeze()  # the context and the interpreter: collections do not rescan them
        others = (
            asyncio.ensure_future(other_calls(store, args.other_writes, rng))
            if args.other_writes
            else None
        )
        try:
            await run_test(Pipeline(stages), frames_to_send=cast(Sequence[Frame], frames))
        finally:
            if others is not None:
                others.cancel()
                written = (await asyncio.gather(others, return_exceptions=True))[0]
                row.other_written = written if isinstance(written, int) else 0
        step = ours.recall_step
        assert step is not None
        row.wall_ms = [ns / 1e6 for ns in ours.wall_ns[1:]]
        row.hop_ms = [ns / 1e6 for ns in ours.hop_ns[1:]]
        row.cpu_ms = [ns / 1e6 for ns in ours.cpu[1:]]
        row.spent = ours.spent[1:]
        row.phases = ours.phases.frames[1:]
        row.steps = ours.steps[1:]
        row.early = ours.early[1:]
        row.trips = ours.frame_trips[1:]
        row.all_trips = list(trips.trips) if trips is not None else []
        if ours.cpu_phases is not None:
            label = f"{backend} {n:,} {'prefetch' if prefetch else 'no prefetch'}"
            args.cpu_lines += cpu_phases_lines(label, ours.cpu_phases.frames[1:])
        row.searches = {
            "asked": step.turns,
            "recalled": step.recalled,
            "missed": step.missed,
            "late": step.late_served,
            "extras let go": extras[0],
            "values in time": extras[1],
            # -1: a commit before extra searches were started only when expected in time
            "extras not started": getattr(step, "extras_skipped", -1),
        }
        row.margin_s = getattr(step, "margin_s", None)
    finally:
        if turn_clock is not None:
            turn_clock.close()
        if trips is not None:
            trips.close()
        loop_steps.close()
        await store.close()
    return row


async def other_calls(store: Any, per_second: float, rng: random.Random) -> int:
    """Other calls of the same process archiving into the same store meanwhile, as their
    writers do: ``per_second`` messages a second of another caller, written once a second
    (``WriterParams.flush_interval_s``) in one batch; until cancelled. Returns how many.
    On SQLite each batch runs on the store's one thread, where the turn's search runs, and
    every ~1,000 pages of WAL its write checkpoints (bugs S15-F-2)."""
    written = 0
    position = 0
    batch = max(1, round(per_second))
    try:
        while True:
            await asyncio.sleep(1.0)
            records = [
                ArchivedMessage(
                    call_id=f"other-call-{position // 60}",
                    position=position % 60,
                    role="user" if position % 2 == 0 else "assistant",
                    content=sentence(rng),
                    message_json="{}",
                    turn=(position % 60) // 2,
                    at=time.time(),
                    user_id="another-caller",
                )
                for position in range(position, position + batch)
            ]
            position += batch
            await store.write(records)
            written += batch
    except asyncio.CancelledError:
        return written


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
            # its processes' CPU besides the pool's backends: autovacuum, the checkpointer
            args.postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        except Exception as e:  # noqa: BLE001 (a benchmark: say why and go on)
            print(f"PostgreSQL skipped: {e}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="frame_bound_"))
    try:
        for n in args.sizes:
            if "sqlite" in args.backends:
                path, built = await sqlite_archive(args.cache, n)
                for prefetch in args.modes:
                    copy = work / "memory.db"
                    shutil.copy(path, copy)  # the call's own writes never reach the cache
                    dirty = _dirty_kib()
                    settled = _written_back(copy) if args.settle else ""
                    row = await one_call(str(copy), "SQLite", args, n, prefetch)
                    row.built = f"{built}; {dirty / 1024:.0f} MB dirty after the copy{settled}"
                    row.built += _others(args, row)
                    copy.unlink()
                    rows.append(row)
                    print(line(row), file=sys.stderr, flush=True)
            if server is not None and n <= args.pg_max:
                filled = f"frame_bound_{n}"
                dsn = server.create_database(filled)
                t0 = time.perf_counter()
                store = open_store(dsn)
                try:
                    await fill(store, n, "voice")
                finally:
                    await store.close()
                built = f"built in {time.perf_counter() - t0:.0f} s"
                if args.settle:
                    built += await _settled(server, dsn)
                for prefetch in args.modes:
                    # each call on its own copy: a call's own messages (the same questions)
                    # are archived, and would be the next call's best hits
                    name = f"{filled}_{'prefetch' if prefetch else 'plain'}"
                    server._run("createdb", *_pg_login(server), "-T", filled, name)
                    if args.settle:  # the copy's pages written out: no checkpoint under it
                        await _checkpoint(server.dsn_for(name))
                    row = await one_call(server.dsn_for(name), "PostgreSQL", args, n, prefetch)
                    row.built = built + _others(args, row)
                    rows.append(row)
                    print(line(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.destroy()
    return rows


def _others(args: argparse.Namespace, row: Row) -> str:
    """What other calls wrote during the row's call (``--other-writes``), for its line."""
    return f"; other calls wrote {row.other_written} messages" if args.other_writes else ""


def _dirty_kib() -> int:
    """The machine's dirty page cache (KiB, /proc/meminfo): what the kernel has still to
    write back."""
    for entry in Path("/proc/meminfo").read_text().splitlines():
        if entry.startswith("Dirty:"):
            return int(entry.split()[1])
    return 0


def _written_back(path: Path) -> str:
    """``path`` written back to storage (a copy's dirty pages: the first checkpoint of the
    call's WAL would otherwise fsync them all on the store's thread); how long it took."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"; written back in {time.perf_counter() - t0:.1f} s"


async def _settled(server: Any, dsn: str) -> str:
    """The built archive as autovacuum leaves it (:func:`_settle.vacuumed`); how long it took."""
    return f"; vacuumed, analyzed in {await vacuumed(dsn):.0f} s"


async def _checkpoint(dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


def _pg_login(server: Any) -> list[str]:
    return ["-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres"]


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
    parser.add_argument(
        "--prefetch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run each size spoken, with RecallPrefetch before the user aggregator "
        "(--no-prefetch: only the questions appended as messages, the figures before it)",
    )
    parser.add_argument(
        "--only-prefetch", action="store_true", help="only the run with RecallPrefetch"
    )
    parser.add_argument(
        "--lead-ms",
        type=float,
        default=200.0,
        help="with prefetch: from the interim of every word to the final transcription and "
        "the turn's end (the questions replay's --spoken-lead-ms; default %(default)s)",
    )
    parser.add_argument(
        "--raw-interims",
        action="store_true",
        help="with prefetch: the interims in lower case without punctuation, as many STTs "
        "send them; only the final is formatted (its words are worked on at the turn's end)",
    )
    parser.add_argument(
        "--cpu-phases",
        action="store_true",
        help="also print the CPU time (the loop's, the store's: SQLite's thread, PostgreSQL's "
        "backends) of each phase of the recall step, over all frames and the 5%% with the "
        "most CPU (benchmarks/_cpu_phases.py; its clocks' reads are in the frames' times)",
    )
    parser.add_argument(
        "--word-ms",
        type=float,
        default=100.0,
        help="with prefetch: from the interim of all but the last word to the interim of "
        "every word (default %(default)s)",
    )
    parser.add_argument(
        "--trips",
        action="store_true",
        help="also print, for the slowest frames, their store trips (the turn's own search: "
        "queued for the store's thread or a pooled connection, run, handed back to the loop; "
        "the other trips run meanwhile) and the step's timed-out waits on the loop's timer "
        "(benchmarks/_phases.py's StoreTrips; its reads are in the frames' times)",
    )
    parser.add_argument(
        "--settle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the archive as a deployed store has it, not as a bulk load or a file copy "
        "leaves it: SQLite's copy written back to storage (fsync) before the call; "
        "PostgreSQL's archive vacuumed and analyzed after the build, its copy checkpointed "
        "(--no-settle: timed right after the copy and the build, as before the twelfth "
        "round: whether autovacuum had passed during the build then depends on how long "
        "the build took, bugs S15-F-4)",
    )
    parser.add_argument(
        "--other-writes",
        type=float,
        default=0.0,
        metavar="N",
        help="N messages a second of other calls archived into the same store during the "
        "timed call, one batch a second (as their writers flush): a deployed process's "
        "store is not written by this call alone (default 0: none, as before)",
    )
    args = parser.parse_args(argv)
    args.cpu_lines = []
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.backends = {b.strip().lower() for b in args.backends.split(",") if b.strip()}
    if args.no_postgres:
        args.backends.discard("postgres")
    if not args.backends or not args.backends <= {"sqlite", "postgres"}:
        parser.error("--backends takes sqlite, postgres or both (comma-separated)")
    if args.only_prefetch and not args.prefetch:
        parser.error("--only-prefetch and --no-prefetch exclude each other")
    args.modes = [True] if args.only_prefetch else [True, False] if args.prefetch else [False]
    if not (0 <= args.lead_ms <= 60_000 and 0 <= args.word_ms <= 60_000):
        parser.error("--lead-ms and --word-ms take 0 to 60000")
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
    report(rows, budget_ms)
    for cpu_line in args.cpu_lines:
        print(cpu_line)
    print(
        f"{time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f} at the end "
        f"on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
