"""``ConversationClock``: the conversation's "now", which archived messages are dated by and
recall's "how long ago" counts from (the recorder owns one per call).

Its value is an epoch plus the time elapsed since the call started. The epoch is
``MemoryParams.conversation_started_at`` when the application gives one (a transcript
replayed with its own date), else the wall clock read once when the call starts. The elapsed
part is measured on the clock of the event loop the call started on, never on the wall
clock: a real loop's is monotonic (a wall clock stepped by NTP mid-call would move a
message's date), and a loop that simulates time (a replay running a call's minutes in
milliseconds) governs it, so a message is dated at its modelled instant, the same from one
run to the next, instead of at wall-clock noise.

What is compared with other processes' wall clocks stays on the wall clock and never reads
this one: the call row's ``started_at``/``ended_at`` (retention, the resume window) and the
forget tombstones' ``since`` (recall's forget watch).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class ConversationClock:
    """One call's conversation clock (see the module docstring).

    Args:
        epoch: When the conversation started (seconds since the epoch,
            ``MemoryParams.conversation_started_at``); ``None``: the wall clock at the start.
    """

    def __init__(self, epoch: float | None = None) -> None:
        """Create the clock, started provisionally now (the call's start starts it again)."""
        self.epoch = epoch
        self._base = 0.0
        self._mark = 0.0
        self._time: Callable[[], float] = time.monotonic
        self.start()

    def start(self, wall: float | None = None) -> None:
        """The call starts: elapsed time counts from here, on the running loop's clock.

        Args:
            wall: The wall clock at the start (the call row's ``started_at``), the epoch
                when none was given; default: read now.

        Called with no loop running (a synchronous caller), the elapsed time is measured on
        ``time.monotonic()`` instead, for the clock's life.
        """
        try:
            # the loop the call runs on: its clock, even when later read from outside it
            # (a closed real loop's is still time.monotonic(), a simulated one's stands still)
            self._time = asyncio.get_running_loop().time
        except RuntimeError:
            self._time = time.monotonic
        self._mark = self._time()
        if self.epoch is not None:
            self._base = self.epoch
        else:
            self._base = time.time() if wall is None else wall

    def set(self, at: float) -> None:
        """The conversation's now is ``at`` (seconds since the epoch) from here, and runs on
        from it: a transcript replayed with its own dates moves it at each session. Before
        the call's start it is the epoch the start uses."""
        self.epoch = at
        self._base = at
        self._mark = self._time()

    def elapsed(self) -> float:
        """Seconds since the start, on the start's clock (never negative)."""
        return max(0.0, self._time() - self._mark)

    def now(self) -> float:
        """The conversation's now: the epoch plus :meth:`elapsed` (seconds since the epoch)."""
        return self._base + self.elapsed()


__all__ = ["ConversationClock"]
