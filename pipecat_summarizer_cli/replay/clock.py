"""A simulated clock for the replay: an asyncio event loop whose time is virtual.

:class:`SimulatedClockLoop` is a standard selector event loop whose ``time()`` returns a
virtual clock. The clock moves only when the loop has nothing left to do at the current
instant (no ready callback, no I/O ready), and then it jumps straight to the next timer.
``asyncio.sleep``, ``asyncio.wait_for`` timeouts and every other timer of Pipecat and of this
package run on it, so a 160-turn call whose user turns are seconds apart replays in about
the time its frames take to process.

Why the order of events is the same as at full speed: at full speed an event at ``t`` (a user
turn, a summary landing) happens after everything scheduled before ``t`` and the work it
triggered have run, provided that work takes less time than the gap to the next event. Here
the clock advances only once all work at the current instant is finished, so every event
fires at its modelled instant, after all earlier events and their consequences, exactly as
in a full-speed run whose processing takes no time. Timers never fire early or out of order
(they are kept in a heap by deadline); the only difference from a wall clock is that the
processing itself takes zero simulated time, which is the ideal the real call approaches
(milliseconds of work between events seconds apart). The result is deterministic: the
same inputs give the same order on any machine, however loaded.

Real I/O (a summarizer over HTTP) is not simulated: while a call is in :func:`real_time`,
the virtual clock is held, so no timer fires early while the loop waits for a socket; the
call's modelled latency is then slept on the virtual clock.

Anything that reads ``time.monotonic()`` directly instead of the loop's clock still sees
wall time; ``ContextSummarizer`` reads its retry backoff, the conversation's clock and the
early searches' age on the loop's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import weakref
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_HELD_POLL_S = 0.005  # how often a held loop looks at its timers again (wall seconds)


class _VirtualSelector:
    """Wraps the real selector: polls real I/O without blocking, then advances the clock."""

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self._loop: weakref.ReferenceType[SimulatedClockLoop] | None = None

    def bind(self, loop: SimulatedClockLoop) -> None:
        self._loop = weakref.ref(loop)

    def __getattr__(self, name: str) -> Any:  # register, unregister, modify, get_map...
        return getattr(self._real, name)

    def select(self, timeout: float | None = None) -> list:
        events = self._real.select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        loop = self._loop() if self._loop is not None else None
        if loop is None or loop.held:
            # real work in progress (or no loop): wait for it in wall time, clock frozen
            wait = _HELD_POLL_S if timeout is None else min(timeout, _HELD_POLL_S)
            return self._real.select(wait)
        if timeout is None:
            return self._real.select(None)  # no timer at all: only real I/O can wake us
        loop.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()


class SimulatedClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a virtual clock (see the module docstring).

    Args:
        start: The clock's initial value, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        """Create the loop."""
        self._now = float(start)
        self._holds = 0
        selector = _VirtualSelector()
        super().__init__(selector)  # type: ignore[arg-type]
        selector.bind(self)

    def time(self) -> float:
        """The virtual clock, in seconds."""
        return self._now

    @property
    def held(self) -> bool:
        """True while real work is awaited and the clock must not move."""
        return self._holds > 0

    def advance(self, seconds: float) -> None:
        """Move the clock forward (called by the selector when the loop is idle)."""
        if seconds > 0:
            self._now += seconds

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Freeze the clock for the duration of the block (real I/O in progress)."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1


@contextlib.contextmanager
def real_time() -> Iterator[None]:
    """Hold the simulated clock, if the running loop has one, while real work is awaited."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, SimulatedClockLoop):
        with loop.hold():
            yield
    else:
        yield


def now() -> float:
    """The running loop's clock (virtual under :class:`SimulatedClockLoop`)."""
    return asyncio.get_running_loop().time()


def run(main: Awaitable[T], *, simulated: bool = True) -> T:
    """Run a coroutine to completion, on a simulated clock unless ``simulated`` is False.

    Args:
        main: The coroutine.
        simulated: Use :class:`SimulatedClockLoop`; otherwise ``asyncio.run``'s loop.
    """
    if not simulated:
        return asyncio.run(main)  # type: ignore[arg-type]
    with asyncio.Runner(loop_factory=SimulatedClockLoop) as runner:
        return runner.run(main)  # type: ignore[arg-type]
