"""Where a timed turn's frame spends its time inside ``ContextSummarizer``, by phase, and
which phases run past the latency budget.

:class:`PhaseClock` wraps, on one summarizer only (instance attributes; the recall step's
module functions ``choose``, ``render`` and ``place_recall`` for the benchmark's process),
the parts of a user turn's frame: counting (``session.turn``), the search
(``_turn_hits``: the wait for the archive, or the early search's answer), the early block
taken (``_early_block``: "take early"), the extra searches (``_gather``, ``_later``), the
choice, the rendering, placing the block in the context copy, the forget watch's answer
(``_watched``), writing the context (``place_recalled``) and pushing the frame on. What no
wrapper covers (the step's own code between them, the loop resuming a task) is ``other``.

Each wrapper notes two ``time.perf_counter`` readings; the benchmark's frame times hold
them (about a microsecond each). :func:`phases_line` prints, for the slowest frames, the
mean time in each phase and the mean time each phase ran past the budget (counted from the
frame's push, as the benchmark's wall time): the work a deadline inside the step would
have to bound.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat_summarizer._recall import step as _step_module

#: The phases, in the order a frame runs them (``hop`` and ``other`` are not wrapped).
PHASES = (
    "hop",
    "counting",
    "search",
    "take early",
    "extra searches",
    "choose",
    "render",
    "place",
    "watch",
    "write",
    "push",
    "other",
)


@dataclass
class FramePhases:
    """One frame: its phases' intervals (``perf_counter`` seconds) and its span."""

    pushed: float = 0.0
    began: float = 0.0
    ended: float = 0.0
    intervals: list[tuple[str, float, float]] = field(default_factory=list)

    def spent(self, after: float = float("-inf")) -> dict[str, float]:
        """Milliseconds per phase of the frame's time later than ``after``."""

        def overlap(a: float, b: float) -> float:
            return max(0.0, b - max(a, after))

        out = dict.fromkeys(PHASES, 0.0)
        out["hop"] = overlap(self.pushed, self.began) * 1000
        covered = 0.0
        for name, a, b in self.intervals:
            ms = overlap(a, b) * 1000
            out[name] += ms
            covered += ms
        out["other"] = max(0.0, overlap(self.began, self.ended) * 1000 - covered)
        return out

    def crossed_in(self, moment: float) -> str:
        """The phase running at ``moment``; between the wrapped ones ``other``, named by the
        phase that ended last before it ("other after search": the step's own code after
        the search, or the loop running something else before it resumed the step)."""
        if moment < self.began:
            return "hop"
        inner = [n for n, a, b in self.intervals if a <= moment < b]
        if inner:
            return inner[-1]
        before = [(b, n) for n, _, b in self.intervals if b <= moment]
        return f"other after {max(before)[1]}" if before else "other before the phases"


class PhaseClock:
    """The phases of the frames of one summarizer (see the module's docstring)."""

    def __init__(self, summarizer: Any) -> None:
        """Wrap ``summarizer``'s session and recall step (none: only the hop and push)."""
        self.frames: list[FramePhases] = []
        self._current: FramePhases | None = None
        session = summarizer._session
        step = summarizer.recall_step
        self._wrap(session, "turn", "counting")
        self._wrap(session, "place_recalled", "write")
        if step is not None:
            for method, name in (
                ("_turn_hits", "search"),
                ("_early_block", "take early"),
                ("_gather", "extra searches"),
                ("_later", "extra searches"),
                ("_watched", "watch"),
            ):
                self._wrap(step, method, name)
            for function, name in (
                ("choose", "choose"),
                ("render", "render"),
                ("place_recall", "place"),
            ):
                self._wrap(_step_module, function, name)

    def _wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        clock = self

        if _is_async(original):

            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                frame, a = clock._current, time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    if frame is not None:
                        frame.intervals.append((name, a, time.perf_counter()))

            setattr(owner, attribute, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                frame, a = clock._current, time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    if frame is not None:
                        frame.intervals.append((name, a, time.perf_counter()))

            setattr(owner, attribute, timed)

    def begin(self, pushed_ns: int, began_ns: int) -> None:
        """A timed frame's ``process_frame`` began (``perf_counter_ns`` readings)."""
        self._current = FramePhases(pushed=pushed_ns / 1e9, began=began_ns / 1e9)

    def push(self, started: float) -> None:
        """The timed frame was pushed on from ``started`` until now."""
        if self._current is not None:
            self._current.intervals.append(("push", started, time.perf_counter()))

    def end(self, ended_ns: int) -> None:
        """The timed frame's ``process_frame`` ended."""
        frame, self._current = self._current, None
        if frame is not None:
            frame.ended = ended_ns / 1e9
            self.frames.append(frame)

    @property
    def timing(self) -> bool:
        """Whether a timed frame is in ``process_frame`` now."""
        return self._current is not None


def _is_async(function: Callable[..., Any]) -> bool:
    import inspect

    return inspect.iscoroutinefunction(function)


def phases_line(
    frames: Sequence[FramePhases],
    walls_ms: Sequence[float],
    budget_ms: float,
    edge_ms: float,
) -> str:
    """For the frames whose wall time is at least ``edge_ms`` (the p99): the mean
    milliseconds per phase; after ``|``, over every frame past ``budget_ms`` (from the push),
    the mean milliseconds each phase ran past it, and the phase each crossed it in (phases
    that took none left out)."""
    pairs = list(zip(frames, walls_ms, strict=True))
    slow = [f for f, w in pairs if w >= edge_ms]
    if not slow:
        return "no frames"
    late = [f for f, w in pairs if w > budget_ms]

    def means(rows: list[dict[str, float]]) -> str:
        if not rows:
            return "none"
        parts = [(k, sum(r[k] for r in rows) / len(rows)) for k in PHASES]
        return ", ".join(f"{k} {v:.2f}" for k, v in parts if v >= 0.005) or "none"

    crossed: dict[str, int] = {}
    for f in late:
        name = f.crossed_in(f.pushed + budget_ms / 1000)
        crossed[name] = crossed.get(name, 0) + 1
    where = ", ".join(f"{k} {v}" for k, v in sorted(crossed.items(), key=lambda kv: -kv[1]))
    past = means([f.spent(f.pushed + budget_ms / 1000) for f in late])
    return (
        f"{len(slow)} slowest: {means([f.spent() for f in slow])} | past {budget_ms:g} ms "
        f"({len(late)} frames): {past}; crossed it in: {where or 'none'}"
    )


@dataclass
class Trip:
    """One trip to the store (``perf_counter`` seconds; ``cpu`` in ms): asked for, begun on
    the store's thread (SQLite) or its leased connection (PostgreSQL), ended there, and the
    moment the loop had its answer back in the asking coroutine."""

    name: str
    submitted: float
    started: float = float("nan")
    ended: float = float("nan")
    resumed: float = float("nan")
    #: the store's CPU for it: SQLite's thread (``thread_time``), PostgreSQL's backend
    cpu: float = 0.0

    def parts(self) -> tuple[float, float, float]:
        """Milliseconds queued (for the thread, or a connection of the pool), running
        there, and handed back (the loop's wake-up and whatever it ran first)."""
        return (
            (self.started - self.submitted) * 1000,
            (self.ended - self.started) * 1000,
            (self.resumed - self.ended) * 1000,
        )


#: The store's own helpers a trip's name looks past (the public method that asked is the name).
_PLUMBING = {
    *("_run", "_query", "_read", "_fetch", "_keyed", "<lambda>", "timed_run", "timed_read"),
    *("_search", "_searched"),
}
#: The trips that are a turn's own search: its watch read in the same trip (one name).
_SEARCHES = ("search", "search_noticing")


def _asker() -> str:
    """The store method that asked for the trip (the first frame outside the plumbing)."""
    import sys

    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name in _PLUMBING:
        frame = frame.f_back
    return "?" if frame is None else frame.f_code.co_name


def _backend_cpu_ns(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class StoreTrips:
    """Every trip to the store while installed: SQLite's ``_run`` (its one thread: a trip
    queues behind the ones before it), PostgreSQL's ``_read`` and ``write`` (a lease of the
    pool, then the statements; the backend's CPU from its ``/proc`` schedstat, read on the
    loop around the use: two reads a trip, in the times), and asyncpg's cancel requests
    (``cancel request``: a statement cancelled). And the recall step's waits on the
    loop's timer (``wait_for_task`` in ``_recall.search``): how late each timed-out wait
    resumed past its timeout (the loop held, or it woke late)."""

    def __init__(self, store: Any, keep: int = 20_000) -> None:
        """Wrap ``store``'s trips (instance attributes) and the search module's waits."""
        from pipecat_summarizer._recall import search as _search_module

        self.trips: list[Trip] = []
        self._cancels: Any = None
        #: (called, timeout s, resumed, answered) of each wait of the step on a task
        self.waits: list[tuple[float, float, float, bool]] = []
        self.keep = keep
        if hasattr(store, "_thread") and hasattr(store, "_run"):
            original_run = store._run

            async def timed_run(fn: Any, *, read: bool = False) -> Any:
                trip = Trip(_asker(), time.perf_counter())

                def traced(conn: Any) -> Any:
                    trip.started = time.perf_counter()
                    c0 = time.thread_time()
                    try:
                        return fn(conn)
                    finally:
                        trip.cpu = (time.thread_time() - c0) * 1000
                        trip.ended = time.perf_counter()

                try:
                    return await original_run(traced, read=read)
                finally:
                    trip.resumed = time.perf_counter()
                    self._note(trip)

            store._run = timed_run
        elif hasattr(store, "_read"):
            original_read = store._read
            original_write = store.write

            def traced_use(trip: Trip, use: Any) -> Any:
                async def used(conn: Any) -> Any:
                    pid = conn.get_server_pid()
                    c0 = _backend_cpu_ns(pid)
                    trip.started = time.perf_counter()
                    try:
                        return await use(conn)
                    finally:
                        trip.ended = time.perf_counter()
                        trip.cpu = (_backend_cpu_ns(pid) - c0) / 1e6

                return used

            def timed_read(use: Any) -> Any:
                # named when called, where the asking method is on the stack: a search runs
                # its read in a task of its own (_postgres_pool.run_on)
                trip = Trip(_asker(), time.perf_counter())

                async def read() -> Any:
                    try:
                        return await original_read(traced_use(trip, use))
                    finally:
                        trip.resumed = time.perf_counter()
                        self._note(trip)

                return read()

            async def timed_write(records: Any) -> Any:
                # a write's transaction leases its connection itself: its backend's CPU
                # is not read (NaN)
                trip = Trip("write", time.perf_counter(), started=time.perf_counter())
                trip.cpu = float("nan")
                try:
                    return await original_write(records)
                finally:
                    trip.ended = trip.resumed = time.perf_counter()
                    self._note(trip)

            store._read = timed_read
            store.write = timed_write
            self._cancels = self._count_cancels()
        original_wait = _search_module.wait_for_task
        waits = self.waits

        async def timed_wait(task: Any, timeout: float) -> None:
            a = time.perf_counter()
            try:
                await original_wait(task, timeout)
            finally:
                waits.append((a, timeout, time.perf_counter(), task.done()))
                del waits[: -self.keep]

        _search_module.wait_for_task = timed_wait
        self._restore = lambda: setattr(_search_module, "wait_for_task", original_wait)

    def _count_cancels(self) -> Any:
        """asyncpg's cancel requests (a statement cancelled: a connection of their own to the
        server, which forks a process for each) as trips named ``cancel request`` (no CPU
        read); returns what puts asyncpg's back."""
        import asyncpg.connect_utils as connect_utils

        original = connect_utils._cancel

        async def timed_cancel(*args: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            trip = Trip("cancel request", now, started=now, cpu=float("nan"))
            try:
                return await original(*args, **kwargs)
            finally:
                trip.ended = trip.resumed = time.perf_counter()
                self._note(trip)

        connect_utils._cancel = timed_cancel
        return lambda: setattr(connect_utils, "_cancel", original)

    def _note(self, trip: Trip) -> None:
        self.trips.append(trip)
        del self.trips[: -self.keep]

    def close(self) -> None:
        """Put the search module's wait back, and asyncpg's cancel (the store's wrappers go
        with the store)."""
        self._restore()
        if self._cancels is not None:
            self._cancels()

    def within(
        self, a: float, b: float
    ) -> tuple[list[Trip], list[tuple[float, float, float, bool]]]:
        """The trips and waits that overlap ``a`` .. ``b`` (``perf_counter`` s)."""
        trips = [t for t in self.trips if t.resumed > a and t.submitted < b]
        waits = [w for w in self.waits if w[2] > a and w[0] < b]
        return trips, waits


#: Per frame: its trips and its waits (see :meth:`StoreTrips.within`).
FrameTrips = tuple[list[Trip], list[tuple[float, float, float, bool]]]


def trips_line(
    frames: Sequence[FramePhases],
    trips: Sequence[FrameTrips],
    walls_ms: Sequence[float],
    edge_ms: float,
) -> str:
    """For the frames whose wall time is at least ``edge_ms``: their own search's trip split
    into queued / run (the store's CPU in it) / handed back (means, ms); the other trips the
    store ran during the frames (by name: count, ms within the frames); the step's waits on
    the loop's timer that timed out, and how late they resumed past their timeout (mean,
    max)."""
    rows = [(f, t) for f, t, w in zip(frames, trips, walls_ms, strict=False) if w >= edge_ms]
    if not rows:
        return "no frames"
    own: list[tuple[float, float, float, float]] = []
    others: dict[str, list[float]] = {}
    late: list[float] = []
    late_busy: list[float] = []
    behind: dict[str, list[float]] = {}
    for frame, (ts, waits) in rows:
        mine = [t for t in ts if t.name in _SEARCHES and frame.began <= t.submitted <= frame.ended]
        for t in mine[:1]:
            q, r, b = t.parts()
            own.append((q, r, t.cpu, b))
            # on SQLite's one thread: the trips that ran while it waited for it
            ahead = {
                o.name for o in ts if o is not t and o.started < t.started and o.ended > t.submitted
            }
            for name in ahead:
                behind.setdefault(name, []).append(q)
        for t in ts:
            if t in mine[:1]:
                continue
            inside = max(0.0, min(t.ended, frame.ended) - max(t.started, frame.pushed)) * 1000
            others.setdefault(t.name, []).append(inside)
        for a, timeout, c, done in waits:
            if not done:
                expiry = a + timeout
                # the store running a trip when the timer expired: on SQLite its thread,
                # which takes the interpreter's lock between its statements
                busy = any(t.started <= expiry < t.ended for t in ts)
                (late_busy if busy else late).append((c - expiry) * 1000)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    if own:
        q, r, c, b = (mean([x[i] for x in own]) for i in range(4))
        search = (
            f"own search ({len(own)}): queued {q:.2f}, ran {r:.2f} (store CPU {c:.2f}), "
            f"handed back {b:.2f}"
        )
        if behind:
            search += "; queued behind " + ", ".join(
                f"{k} in {len(v)} (queued {mean(v):.2f})" for k, v in sorted(behind.items())
            )
    else:
        search = "no own search"
    other = ", ".join(
        f"{k} {len(v)} x {mean(v):.2f}"
        for k, v in sorted(others.items(), key=lambda kv: -sum(kv[1]))
    )

    def lateness(values: list[float]) -> str:
        if not values:
            return "none"
        return f"{len(values)}, late by {mean(values):.2f} (max {max(values):.2f})"

    timer = (
        f"timed-out waits with the store running a trip {lateness(late_busy)}, "
        f"with it idle {lateness(late)}"
    )
    return f"{len(rows)} frames: {search}; other trips in them: {other or 'none'}; {timer}"


def trip_costs_line(trips: Sequence[Trip]) -> str:
    """Every trip of the call by name: how many, the store's CPU p50 / p90 / p99 (ms:
    SQLite's thread, PostgreSQL's backend; a machine's waits for a CPU are not in it) and
    the time run there p50 / p99 (the wall time, waits included)."""
    by_name: dict[str, list[Trip]] = {}
    for t in trips:
        if t.ended == t.ended:  # run (not NaN): a trip cancelled before it began has no cost
            by_name.setdefault(t.name, []).append(t)

    def q(values: list[float], share: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    parts = []
    for name, ts in sorted(by_name.items(), key=lambda kv: -len(kv[1])):
        cpu = [t.cpu for t in ts if t.cpu == t.cpu]
        ran = [t.parts()[1] for t in ts]
        spent = (
            f"CPU {q(cpu, 0.5):.2f} / {q(cpu, 0.9):.2f} / {q(cpu, 0.99):.2f}" if cpu else "CPU -"
        )
        parts.append(f"{name} {len(ts)}: {spent}, ran {q(ran, 0.5):.2f} / {q(ran, 0.99):.2f}")
    return "; ".join(parts) or "no trips"
