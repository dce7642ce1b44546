"""The CPU time a timed turn's frame spends in each phase of the recall step, on the event loop
and in the store: the SQLite store's thread, or PostgreSQL's backends of the store's pool
(``frame_bound.py --cpu-phases``).

:class:`CpuPhases` wraps, on one summarizer (instance attributes; the step module's
``choose``, ``render`` and ``place_recall`` for the process), the phases
``benchmarks/_phases.py`` times by the wall clock: the search (``_turn_hits``), the extra
searches (``_gather``, ``_later``), the choice, the rendering, placing, the forget watch, and
the whole step (``prepare``). Each reads the loop thread's CPU clock (``time.thread_time``)
and the store's (the ``sqlite-store`` threads' ``pthread_getcpuclockid``; PostgreSQL's backends'
``/proc`` schedstat: its statements run there) at its start and end: CPU,
not wall, so a shared machine's waits for a CPU are not in it. The store's CPU in a phase is
what its thread ran meanwhile (a search let go by an earlier turn included). A phase that
awaits counts what else the loop ran meanwhile too (other tasks, the harness). Linux.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipecat_summarizer._recall import step as _step_module

#: The wrapped phases: the step's methods, then the step module's functions.
METHODS = (
    ("_turn_hits", "search"),
    ("_gather", "gather"),
    ("_later", "values"),
    ("_watched", "watch"),
    ("prepare", "step"),
)
FUNCTIONS = (("choose", "choose"), ("render", "render"), ("place_recall", "place"))


def store_cpu(pids: Sequence[int] = ()) -> float:
    """CPU seconds the SQLite store's threads have run (0.0 without one), and the processes
    ``pids`` (PostgreSQL's backends of the store's pool: ``/proc`` schedstat)."""
    total = 0.0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    for thread in threading.enumerate():
        if thread.name.startswith("sqlite-store") and thread.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # the thread ended meanwhile
                pass
    return total


class CpuPhases:
    """Per timed frame, CPU milliseconds (loop, store thread) by phase (see the module)."""

    def __init__(self, summarizer: Any, pids: Sequence[int] = ()) -> None:
        """Wrap ``summarizer``'s recall step and the step module's functions; ``pids``: the
        PostgreSQL store's backends, counted as the store's CPU."""
        self.pids = list(pids)
        self.frames: list[dict[str, list[float]]] = []
        self._current: dict[str, list[float]] | None = None
        self._start = (0.0, 0.0)
        step = summarizer.recall_step
        if step is None:
            return
        for method, name in METHODS:
            self._wrap(step, method, name)
        for function, name in FUNCTIONS:
            self._wrap(_step_module, function, name)

    def _add(self, name: str, loop: float, store: float) -> None:
        if self._current is not None:
            spent = self._current.setdefault(name, [0.0, 0.0])
            spent[0] += loop * 1000
            spent[1] += store * 1000

    def _wrap(self, owner: Any, attribute: str, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, attribute)
        add = self._add
        pids = self.pids

        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                loop, store = time.thread_time(), store_cpu(pids)
                try:
                    return await original(*args, **kwargs)
                finally:
                    add(name, time.thread_time() - loop, store_cpu(pids) - store)

            setattr(owner, attribute, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                loop, store = time.thread_time(), store_cpu(pids)
                try:
                    return original(*args, **kwargs)
                finally:
                    add(name, time.thread_time() - loop, store_cpu(pids) - store)

            setattr(owner, attribute, timed)

    def begin(self) -> None:
        """A timed frame's ``process_frame`` begins."""
        self._current = {}
        self._start = (time.thread_time(), store_cpu(self.pids))

    def end(self) -> None:
        """It ended: its phases are kept, with the whole frame's as ``frame``."""
        frame, self._current = self._current, None
        if frame is not None:
            frame["frame"] = [
                (time.thread_time() - self._start[0]) * 1000,
                (store_cpu(self.pids) - self._start[1]) * 1000,
            ]
            self.frames.append(frame)


def cpu_phases_lines(label: str, frames: list[dict[str, list[float]]]) -> list[str]:
    """Per phase, mean CPU ms (loop / store thread) a frame, over all the frames and over the
    5% with the most CPU (at least 3), and the share of frames the phase ran in."""
    if not frames:
        return []
    ranked = sorted(frames, key=lambda f: -sum(f["frame"]))
    top = ranked[: max(3, len(ranked) // 20)]
    names = ["frame", "step", *(n for _, n in METHODS[:-1]), *(n for _, n in FUNCTIONS)]

    def mean(rows: list[dict[str, list[float]]], name: str, i: int) -> float:
        return sum(r.get(name, [0.0, 0.0])[i] for r in rows) / len(rows)

    out = [
        f"{label}: CPU ms a frame, loop / store (its thread or server backends): "
        f"all {len(frames)} frames | the {len(top)} with the most CPU | share of frames with "
        "the phase"
    ]
    for name in names:
        share = sum(1 for f in frames if name in f) / len(frames)
        out.append(
            f"  {name:8s} {mean(frames, name, 0):6.2f} / {mean(frames, name, 1):5.2f} | "
            f"{mean(top, name, 0):6.2f} / {mean(top, name, 1):5.2f} | {share:4.0%}"
        )
    return out
