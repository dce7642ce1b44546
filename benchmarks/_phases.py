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
        """The phase running at ``moment`` (``other`` between the wrapped ones)."""
        if moment < self.began:
            return "hop"
        inner = [n for n, a, b in self.intervals if a <= moment < b]
        return inner[-1] if inner else "other"


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
