"""Where a timed turn's wall time went: a benchmark's tail, attributed (Linux).

A slow turn is slow for one of a few reasons, and only some of them are recall's: its own
work (CPU time, of which the interpreter's garbage collections are part), a wait for a CPU
while other processes ran (a shared machine: the threads were runnable, not running), or
a wait for something else (reads from storage of pages not in the OS page cache, a
thread's hand-over). :class:`TurnClock` reads, around each timed turn and outside its
timestamps, the kernel's counters of this process's threads (and of a database server's
processes, when given): the CPU time and the run-queue wait (``/proc/.../schedstat``), the
bytes read from storage (``/proc/.../io``), and the garbage collections that overlapped the
turn (``gc.callbacks``: a full collection of a process that imported Pipecat, ~44,000
objects, takes 12-25 ms here; ``gc.freeze()`` after start-up, the application's choice,
takes it out), and the machine meanwhile (``/proc/stat``: every process's CPU, and the time the
hypervisor stole, which on this VM is neither a thread's CPU time nor its wait for a CPU, so
it lands in "other"; a database server's background processes when given). Nothing is
discarded: :func:`tail_line` prints the slowest
turns' wall time split into these parts, beside the p99 without the waits for a CPU (what
a machine running nothing else would show).

A deadline inside the recall step is kept only if the event loop gets control at it: a
loop step (one callback, one step of a task) that runs across it holds the frame past it,
whatever the step's timers say. :class:`LoopSteps` notes every loop step longer than a
threshold (its span, and the task's coroutine or Pipecat task by name); :func:`cause`
names why a frame ran past the budget: a wait for a CPU, a garbage collection, a long
loop step, or else the phase it crossed the budget in.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Spent:
    """One turn's wall time and its parts (ms; storage reads in KiB)."""

    wall: float
    cpu: float  # this process's threads (and the server's processes): GC included
    queued: float  # its threads runnable, waiting for a CPU (summed: they may overlap)
    gc: float  # garbage collections that overlapped the turn (their wall time)
    read_kib: float  # read from storage (pages not in the OS page cache)
    #: CPU time by thread: "loop" (the process's main thread), the others by their name
    #: ("sqlite-store", "server": the server's processes)
    threads: dict[str, float] = field(default_factory=dict)
    #: the machine meanwhile (``/proc/stat``, 10 ms ticks: means over many turns only): the
    #: CPU time every process ran (all CPUs), and the time the hypervisor took from the
    #: machine's CPUs (steal: not counted as anyone's CPU time nor as a wait for a CPU)
    machine: float = 0.0
    steal: float = 0.0
    #: the database server's processes besides the pool's backends (autovacuum, the
    #: checkpointer, the WAL and background writers), when a server is watched
    server_bg: float = 0.0

    @property
    def others(self) -> float:
        """Other processes' CPU time on the machine during the turn (coarse: see
        ``machine``); never below 0."""
        return max(0.0, self.machine - self.cpu - self.server_bg)

    @property
    def runq(self) -> float:
        """The wait for a CPU counted in the wall time: at most what the CPU time leaves
        (two threads waiting at once wait the same milliseconds)."""
        return max(0.0, min(self.queued, self.wall - self.cpu))

    @property
    def other(self) -> float:
        """Neither running nor waiting for a CPU: blocked on storage reads, a thread's
        hand-over (below 0 when two threads ran at once)."""
        return self.wall - self.cpu - self.runq


def _schedstat(path: str) -> tuple[int, int]:
    try:
        on_cpu, waiting, _ = Path(path).read_text().split()
        return int(on_cpu), int(waiting)
    except (OSError, ValueError):
        return 0, 0


def _read_bytes(path: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _machine_ns() -> tuple[int, int]:
    """The machine's CPU time so far, busy and stolen (ns, from 10 ms ticks)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) * tick, steal * tick


class ServerProcesses:
    """A database server's processes (the postmaster's children), listed again at most
    every ``refresh_s`` (autovacuum workers come and go): their CPU time, less ``skip``'s
    (the pool's backends, counted apart)."""

    def __init__(self, postmaster: int, skip: Sequence[int] = (), refresh_s: float = 0.5):
        """Watch ``postmaster``'s children."""
        self.postmaster = postmaster
        self.skip = set(skip)
        self.refresh_s = refresh_s
        self._pids: list[int] = []
        self._listed = float("-inf")

    def _list(self) -> list[int]:
        now = time.monotonic()
        if now - self._listed >= self.refresh_s:
            self._listed = now
            pids = []
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == self.postmaster and int(entry) not in self.skip:
                    pids.append(int(entry))
            self._pids = pids
        return self._pids

    def cpu_ns(self) -> int:
        """Their CPU time so far (ns); a process that ended since the listing counts 0:
        a turn's difference is then its own part, or negative (clipped by the reader)."""
        return sum(_schedstat(f"/proc/{pid}/schedstat")[0] for pid in self._list())


#: Per thread name, ns on a CPU; ns waiting for one (all threads); bytes read from storage;
#: the machine's busy and stolen ns; the server's other processes' ns.
Counters = tuple[dict[str, int], int, int, tuple[int, int], int]


class TurnClock:
    """Counters read around each timed turn: :meth:`start` before its first timestamp,
    :meth:`stop` after its last (their own reads are not in the wall time)."""

    def __init__(self, pids: Sequence[int] = (), server: ServerProcesses | None = None) -> None:
        """This process's threads, and the processes ``pids`` (a server's backends); the
        server's other processes, when given."""
        self.pids = list(pids)
        self.server = server
        self._gcs: list[tuple[float, float]] = []
        self._gc_started: dict[int, float] = {}
        self._names: dict[str, str] = {}
        gc.callbacks.append(self._on_gc)

    def close(self) -> None:
        """Stop watching the collections."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        key = info["generation"]
        if phase == "start":
            self._gc_started[key] = now
        elif key in self._gc_started:
            self._gcs.append((self._gc_started.pop(key), now))
            del self._gcs[:-1000]

    def _name(self, task: str) -> str:
        if task not in self._names:
            named = {str(t.native_id): t.name for t in threading.enumerate()}
            name = "loop" if int(task) == os.getpid() else named.get(task, "other")
            # "sqlite-store_0": one name for a store's threads, whatever their number
            self._names[task] = name.rstrip("0123456789").rstrip("_")
        return self._names[task]

    def _counters(self) -> Counters:
        threads: dict[str, int] = {}
        waiting = 0
        for task in os.listdir("/proc/self/task"):
            a, b = _schedstat(f"/proc/self/task/{task}/schedstat")
            name = self._name(task)
            threads[name] = threads.get(name, 0) + a
            waiting += b
        read = _read_bytes("/proc/self/io")
        for pid in self.pids:
            a, b = _schedstat(f"/proc/{pid}/schedstat")
            threads["server"] = threads.get("server", 0) + a
            waiting += b
            read += _read_bytes(f"/proc/{pid}/io")
        server = self.server.cpu_ns() if self.server is not None else 0
        return threads, waiting, read, _machine_ns(), server

    def start(self) -> tuple[Counters, float]:
        """The counters, then the turn's first timestamp."""
        counters = self._counters()
        return counters, time.perf_counter()

    def stop(self, started: tuple[Counters, float]) -> Spent:
        """The turn's last timestamp, then the counters: what the turn spent."""
        t1 = time.perf_counter()
        (cpu0, wait0, read0, machine0, bg0), t0 = started
        cpu1, wait1, read1, machine1, bg1 = self._counters()
        collected = sum(min(b, t1) - max(a, t0) for a, b in self._gcs if b > t0 and a < t1)
        threads = {k: (v - cpu0.get(k, 0)) / 1e6 for k, v in cpu1.items()}
        return Spent(
            wall=(t1 - t0) * 1000,
            cpu=sum(threads.values()),
            queued=(wait1 - wait0) / 1e6,
            gc=collected * 1000,
            read_kib=(read1 - read0) / 1024,
            threads={k: v for k, v in threads.items() if v > 0},
            machine=(machine1[0] - machine0[0]) / 1e6,
            steal=(machine1[1] - machine0[1]) / 1e6,
            server_bg=max(0, bg1 - bg0) / 1e6,
        )


#: A loop step noted by :class:`LoopSteps`: its start and end (``perf_counter`` s), its name.
Step = tuple[float, float, str]


class LoopSteps:
    """Every event-loop step longer than ``threshold_s`` while installed (this process's
    loops): ``asyncio.Handle._run`` wrapped, two ``perf_counter`` reads a callback."""

    def __init__(self, threshold_s: float = 0.0007, keep: int = 5000) -> None:
        """Not installed yet."""
        self.threshold_s = threshold_s
        self.keep = keep
        self.steps: list[Step] = []
        self._original: Any = None

    def install(self) -> None:
        """Wrap ``Handle._run`` (once)."""
        if self._original is not None:
            return
        original = self._original = asyncio.events.Handle._run
        noted = self

        def _run(handle: asyncio.events.Handle) -> None:
            a = time.perf_counter()
            try:
                original(handle)
            finally:
                b = time.perf_counter()
                if b - a > noted.threshold_s:
                    noted._note(a, b, handle)

        asyncio.events.Handle._run = _run  # type: ignore[method-assign]

    def close(self) -> None:
        """Put ``Handle._run`` back."""
        if self._original is not None:
            asyncio.events.Handle._run = self._original  # type: ignore[method-assign]
            self._original = None

    def _note(self, a: float, b: float, handle: asyncio.events.Handle) -> None:
        self.steps.append((a, b, step_name(handle)))
        del self.steps[: -self.keep]

    def within(self, a: float, b: float) -> list[Step]:
        """The steps that overlap ``a`` .. ``b``."""
        return [s for s in self.steps if s[1] > a and s[0] < b]


def step_name(handle: asyncio.events.Handle) -> str:
    """A loop step's name: the task's coroutine (a Pipecat task's own name: its processor),
    or the callback's."""
    callback = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        name = getattr(task.get_coro(), "__qualname__", "task")
        if "run_coroutine" in name:  # Pipecat's TaskManager: the task's name says whose
            return "pipecat " + task.get_name().split("::")[0]
        return str(name)
    return str(getattr(callback, "__qualname__", type(callback).__name__))


def cause(spent: Spent, steps: Sequence[Step], past: float, ended: float, crossed_in: str) -> str:
    """Why a frame that ended at ``ended`` ran past the budget at ``past`` (``perf_counter``
    s): waiting for a CPU or a garbage collection, if either was at least the time past it;
    else a loop step that ran at least half that time past it (the longest); else the phase
    the frame crossed the budget in."""
    over = (ended - past) * 1000
    if spent.runq >= over:
        return "waiting for a CPU"
    if spent.steal >= over:
        return "stolen by the hypervisor"
    if spent.gc >= over:
        return "garbage collection"
    overlap = [(min(b, ended) - max(a, past)) * 1000 for a, b, _ in steps]
    if overlap and max(overlap) >= over / 2:
        return "loop step " + steps[overlap.index(max(overlap))][2]
    return "phase " + crossed_in


async def pool_backends(store: Any) -> list[int]:
    """The PostgreSQL server backends of the store's pool, every connection it may open
    opened first (``max_size`` statements at once): a connection opened later, by the
    turns, would be a backend whose CPU time no frame is charged."""
    size = int(getattr(store, "max_size", 1))
    await asyncio.gather(*(store._fetch("SELECT pg_sleep(0.05)") for _ in range(size)))
    rows = await store._fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_type = 'client backend'"
    )
    return [r[0] for r in rows]


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (inclusive), as the benchmarks print them."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def tail_line(
    spent: Sequence[Spent],
    q: float = 99,
    percentile: Callable[[list[float], float], float] | None = None,
) -> str:
    """The slowest turns (at or above the ``q``-th percentile) split into their parts
    (means, ms), and the ``q``-th percentile without the waits for a CPU. ``percentile``
    (values, a share of 1) is the caller's own, if it prints its table with another."""
    if not spent:
        return "no turns"

    def quantile(values: list[float], q: float) -> float:
        return percentile(values, q / 100) if percentile is not None else pct(values, q)

    edge = quantile([s.wall for s in spent], q)
    slow = [s for s in spent if s.wall >= edge]
    n = len(slow)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / n

    names = sorted({k for s in slow for k in s.threads}, key=lambda k: (k != "loop", k))
    by_thread = "".join(f"{k} {mean([s.threads.get(k, 0.0) for s in slow]):.2f}, " for k in names)

    return (
        f"p{q:g} {edge:.2f}; its {n} slowest of {len(spent)}: "
        f"wall {mean([s.wall for s in slow]):.2f}"
        f" = CPU {mean([s.cpu for s in slow]):.2f} ({by_thread}GC {mean([s.gc for s in slow]):.2f})"
        f" + waiting for a CPU {mean([s.runq for s in slow]):.2f}"
        f" + other {mean([s.other for s in slow]):.2f} (storage reads"
        f" {mean([s.read_kib for s in slow]):.0f} KiB); turns that read storage"
        f" {sum(s.read_kib > 0 for s in spent)}, with a GC {sum(s.gc > 0 for s in spent)};"
        f" p{q:g} without the waits for a CPU {quantile([s.wall - s.runq for s in spent], q):.2f};"
        f" the machine during them (10 ms ticks): other processes' CPU"
        f" {mean([s.others for s in slow]):.2f}, the server's background"
        f" {mean([s.server_bg for s in slow]):.2f}, stolen {mean([s.steal for s in slow]):.2f};"
        f" over all turns: stolen {sum(s.steal for s in spent) / len(spent):.2f}, other"
        f" processes {sum(s.others for s in spent) / len(spent):.2f} a turn"
    )
