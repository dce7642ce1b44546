"""The process's recall turns as the indexing thread sees them: a piece of semantic recall's
index embedding starts only while no recall turn of the process is on its way
(:data:`TURNS`), or once it has waited its cap (:func:`hold_cap`). Numpy-free: the recall
step of every call imports it, semantic or not."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: What a piece of the index's embedding should take (seconds of the thread's time): a few
#: messages of a sentence model (~6-16 ms each: pieces of 4 embed 82 a CPU second, of 1
#: 60, of 16 77), a chunk whole of a fast one (WordLlama: ~0.05 ms a message).
PIECE_S = 0.05
#: Most texts in a piece (the index's chunk) and the first piece's (no cost measured yet).
PIECE_MOST = 64
PIECE_FIRST = 2
#: The embedding's share of the time, at most, in a process whose turns never pause (many
#: calls: a turn always on its way somewhere): the thread waits its cap, then runs a step.
BUSY_SHARE = 0.1
#: The least and the most the thread waits for the turns before a step (seconds): at least
#: a turn's whole window at the default budget (10 ms, then its block placed) even when the
#: steps are quick; at most this long, however slow the last step was (a loaded machine).
HOLD_FLOOR_S = 0.05
HOLD_MOST_S = 2.0


def piece_texts(per_text_s: float | None) -> int:
    """(Pure.) How many texts the next piece embeds: about :data:`PIECE_S` of the thread's
    time at ``per_text_s`` a text (measured on the last piece; ``None``: none measured yet,
    :data:`PIECE_FIRST`), between 1 and :data:`PIECE_MOST`."""
    if per_text_s is None:
        return min(PIECE_FIRST, PIECE_MOST)
    if per_text_s * PIECE_MOST <= PIECE_S:  # a whole chunk fits (a clock too coarse: 0)
        return PIECE_MOST
    return max(1, min(PIECE_MOST, int(PIECE_S / per_text_s)))


def hold_cap(step_s: float | None) -> float:
    """(Pure.) The longest the thread waits for the turns on their way before its next
    step, the last step having taken ``step_s`` of its time (``None``: :data:`PIECE_S`):
    long enough that, turns never pausing, the steps take at most :data:`BUSY_SHARE` of the
    time (``step / (cap + step)``), between :data:`HOLD_FLOOR_S` and :data:`HOLD_MOST_S`."""
    step = PIECE_S if step_s is None else max(0.0, step_s)
    return max(HOLD_FLOOR_S, min(HOLD_MOST_S, step * (1 - BUSY_SHARE) / BUSY_SHARE))


def holds(on_their_way: int, waiting_for_index: int) -> bool:
    """(Pure.) Whether the indexing thread waits before its next step: some turn is on its
    way, and none is waiting for an index to grow (a returning caller's first question
    waits for the first piece of their earlier calls: held back, it would wait for
    nothing)."""
    return on_their_way > 0 and waiting_for_index == 0


class TurnGate:
    """The process's recall turns on their way, as the indexing thread sees them.

    A turn is on its way from the moment its step starts (the frame that asks for the block)
    until its block is placed or let go (:meth:`turn`, on the event loop). The indexing
    thread calls :meth:`step` before each piece, and between the layers of a model that
    lets it (``pausable``: MiniLM); there it waits while a turn is on its way, at most
    :func:`hold_cap`. The query thread (a turn's own ranking) never waits here.
    """

    def __init__(self) -> None:
        """No turn on its way."""
        self._reset()

    def _reset(self) -> None:
        # also a forked child's first act: its parent's turns are not its own, and a lock
        # held in the parent at the fork would never be released in the child
        self._changed = threading.Condition()
        self._on_their_way = 0
        self._waiting = 0  # turns waiting for an index to grow (see holds)
        self._mark: float | None = None  # the thread's time at the last step (thread's only)
        self._step_s: float | None = None
        self._per_text_s: float | None = None
        #: Counters (no text): steps taken, steps that waited for a turn first, and steps
        #: taken at the cap with a turn still on its way.
        self.steps = 0
        self.waited = 0
        self.capped = 0

    @property
    def busy(self) -> bool:
        """Whether the thread would wait now (:func:`holds`)."""
        return holds(self._on_their_way, self._waiting)

    @contextmanager
    def turn(self) -> Iterator[None]:
        """(Event loop.) A turn on its way for the block of the ``with``."""
        with self._changed:
            self._on_their_way += 1
        try:
            yield
        finally:
            with self._changed:
                self._on_their_way -= 1
                self._changed.notify_all()

    @contextmanager
    def waiting_for_index(self) -> Iterator[None]:
        """(Event loop.) A turn waits for an index to grow: the thread does not hold."""
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._waiting -= 1

    def piece(self) -> int:
        """(Indexing thread.) Texts the next piece embeds (:func:`piece_texts`)."""
        return piece_texts(self._per_text_s)

    def step(self) -> None:
        """(Indexing thread.) Before a step: wait while a turn is on its way, at most
        :func:`hold_cap` of the step before."""
        if self._mark is not None:
            self._step_s = time.thread_time() - self._mark
        with self._changed:
            self.steps += 1
            if self.busy:
                self.waited += 1
                if not self._changed.wait_for(lambda: not self.busy, hold_cap(self._step_s)):
                    self.capped += 1
        self._mark = time.thread_time()

    def piece_done(self, texts: int, seconds: float) -> None:
        """(Indexing thread.) A piece of ``texts`` took ``seconds`` of the thread's time."""
        self._per_text_s = seconds / max(texts, 1)


#: The process's one gate: every call's turns, every index's pieces (one indexing thread).
TURNS = TurnGate()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=TURNS._reset)


__all__ = [
    "BUSY_SHARE",
    "HOLD_FLOOR_S",
    "HOLD_MOST_S",
    "PIECE_FIRST",
    "PIECE_MOST",
    "PIECE_S",
    "TURNS",
    "TurnGate",
    "hold_cap",
    "holds",
    "piece_texts",
]
