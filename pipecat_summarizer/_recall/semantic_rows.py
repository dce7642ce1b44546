"""The rows of semantic recall's index
(:class:`~pipecat_summarizer._recall.semantic.SemanticIndex`): the embedded messages' state,
the archive's reads that feed it, and the worker threads that embed messages and queries off
the event loop; the indexing thread's pieces, each started only while no recall turn of the
process is on its way (:data:`TURNS`), or once it has waited its cap (:func:`hold_cap`)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipecat_summarizer._recall.embedding import Embedder
from pipecat_summarizer._recall.vector_cache import cached_vectors
from pipecat_summarizer.errors import PipecatSummarizerError

#: An embedded message: ``ArchivedText``'s fields as a tuple, in its order (``SemanticHit(*m)``
#: builds a hit of it). A plain tuple of strings and numbers, which the garbage collector stops
#: tracking: 20,000 objects kept per call made its full passes (50-130 ms, GIL held) come sooner.
Message = tuple[str, int, int, float, str, str]


@dataclass
class State:
    """The embedded messages: row ``i`` of ``vectors`` is ``messages[i]``.

    Changed on the event loop only, and only by appending (``messages`` and ``rows`` first,
    then ``vectors``), so a ranking in a worker thread that took ``vectors`` reads rows that
    never change. Dropping the caller (a forget) replaces the state whole.
    """

    messages: list[Message] = field(default_factory=list)
    rows: dict[tuple[str, int], int] = field(default_factory=dict)
    buffer: np.ndarray | None = None  # room to grow: rows past len(messages) are not read
    vectors: np.ndarray | None = None  # buffer[: len(messages)]


_EXECUTORS: dict[str, ThreadPoolExecutor] = {}
_EXECUTOR_LOCK = threading.Lock()


def _executor(name: str) -> ThreadPoolExecutor:
    with _EXECUTOR_LOCK:
        if name not in _EXECUTORS:
            _EXECUTORS[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return _EXECUTORS[name]


def embedding_executor() -> ThreadPoolExecutor:
    """The process's one indexing thread (``semantic-embed``), shared by every call and
    event loop: the work is CPU-bound, so more threads would only take more of the GIL from
    the loops. Its queue is bounded by the index: each call hands it one chunk at a time."""
    return _executor("semantic-embed")


def query_executor() -> ThreadPoolExecutor:
    """The process's one query thread (``semantic-query``): a turn's query is never queued
    behind a returning caller's indexing (a chunk of a sentence encoder takes ~0.5 s)."""
    return _executor("semantic-query")


def embed_into(
    embedder: Embedder,
    texts: list[str],
    buffer: np.ndarray | None,
    n: int,
    owner: str | None = None,
    live: Callable[[], bool] = lambda: True,
) -> tuple[np.ndarray, int]:
    """(Worker thread.) ``buffer`` with the vectors of ``texts`` in rows ``n`` on: the same
    array when it has room (rows from ``n`` on are read by no one yet), else a grown copy;
    and how many vectors came from the cache (``owner``'s, see
    :func:`~pipecat_summarizer._recall.embedding.cached_vectors`). The texts not cached are
    embedded in pieces that give way to the process's turns (:func:`embed_pieces`).

    Raises:
        Stale: ``live()`` turned false before a piece (nothing of the chunk is cached).
    """
    vectors, reused = cached_vectors(
        embedder, texts, owner, embed=lambda missing: embed_pieces(embedder, missing, live)
    )
    need = n + len(vectors)
    if buffer is None or need > len(buffer) or buffer.shape[1] != vectors.shape[1]:
        grown = np.zeros((max(need, 2 * n, 256), vectors.shape[1]), dtype=np.float32)
        if buffer is not None and n:
            grown[:n] = buffer[:n]
        buffer = grown
    buffer[n:need] = vectors
    return buffer, reused


# -- the indexing thread gives way to the turns ------------------------------------------
#
# The process's turns run on its event loops against a 10 ms budget; the indexing thread
# (a sentence model: 6-16 ms of CPU a message) took a core and the GIL from them: LoCoMo at
# the real budget read 1.4-1.5 points under the lexical run beside it with the turn's own
# ranking never started, and equal at 1 s (bugs S16-G-1). So the thread embeds in pieces of
# about PIECE_S of CPU each and starts one only while no turn is on its way; a turn that
# starts during a piece shares the cores with its rest only.

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


class Stale(PipecatSummarizerError):
    """The chunk being embedded no longer serves its index (the caller was forgotten, the
    call ended): its other pieces are not embedded."""


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


def embed_pieces(
    embedder: Embedder,
    texts: Sequence[str],
    live: Callable[[], bool] = lambda: True,
    gate: TurnGate = TURNS,
) -> np.ndarray:
    """(Indexing thread.) ``embedder``'s vectors of ``texts``, in pieces (shortest texts
    first, so a piece pads little), each step of them (a piece's start; each layer of a
    ``pausable`` model) taken once ``gate`` lets it: no turn on its way, or its cap waited.

    Raises:
        Stale: ``live()`` turned false before a piece.
    """
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    pausable = getattr(embedder, "pausable", False)
    out: np.ndarray | None = None
    at = 0
    while at < len(order):
        rows = order[at : at + gate.piece()]
        at += len(rows)
        gate.step()
        if not live():
            raise Stale
        began = time.thread_time()
        piece = [texts[i] for i in rows]
        if pausable:
            found = embedder.embed(piece, between=gate.step)  # type: ignore[call-arg]
        else:
            found = embedder.embed(piece)
        vectors = np.asarray(found, dtype=np.float32)
        gate.piece_done(len(rows), time.thread_time() - began)
        if out is None:
            out = np.zeros((len(texts), vectors.shape[-1]), np.float32)
        out[rows] = vectors
    return np.zeros((0, 0), np.float32) if out is None else out


def mine(m: Any, user_id: str | None) -> bool:
    """Whether ``m`` is the caller's own message, whatever the archive returns (a call_id
    another caller used too); without a ``user_id``, only messages archived without one."""
    return getattr(m, "user_id", None) == user_id


async def read_all(
    archive: Any, call_id: str, cursor: dict[str, int], user_id: str | None
) -> list[Message]:
    """The caller's messages of ``call_id`` from ``cursor``'s position on (moved past them)."""
    rows = await archive.messages(call_id)
    start = cursor.get(call_id, 0)
    found = [m for m in rows if int(m.position) >= start]
    if found:
        cursor[call_id] = max(int(m.position) for m in found) + 1
    return [as_message(m) for m in found if mine(m, user_id)]


async def read_new(
    archive: Any, call_id: str, cursor: dict[str, int], user_id: str | None, most: int = 512
) -> list[Message]:
    """The caller's messages of a running call archived since ``cursor`` (a running call
    grows by a few messages a turn: read forward from the last one)."""
    if call_id not in cursor:
        found = await read_all(archive, call_id, cursor, user_id)
        cursor.setdefault(call_id, 0)
        return found
    out: list[Message] = []
    at = cursor[call_id]
    for _ in range(most):
        m = await archive.message(call_id, at)
        if m is None:
            break
        if mine(m, user_id):
            out.append(as_message(m))
        at += 1
    cursor[call_id] = at
    return out


class SimilarityView(Mapping[tuple[str, int], float]):
    """``(call_id, position) -> cosine`` over the index's rows, without building a dict of
    every message each turn."""

    def __init__(self, rows: Mapping[tuple[str, int], int], sims: np.ndarray):
        self._rows, self._sims = rows, sims

    def __getitem__(self, key: tuple[str, int]) -> float:
        row = self._rows[key]
        if row >= len(self._sims):  # embedded after this turn's ranking
            raise KeyError(key)
        return float(self._sims[row])

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def read_error(future: asyncio.Future) -> None:
    # an early embedding that failed costs nothing: the turn embeds its query itself
    if not future.cancelled():
        future.exception()


def as_message(m: Any) -> Message:
    return (
        str(m.call_id),
        int(m.position),
        int(getattr(m, "turn", 0) or 0),
        float(getattr(m, "at", 0.0) or 0.0),
        str(m.role),
        str(m.content or ""),
    )


__all__ = [
    "TURNS",
    "Message",
    "SimilarityView",
    "Stale",
    "State",
    "TurnGate",
    "as_message",
    "embed_into",
    "embed_pieces",
    "embedding_executor",
    "hold_cap",
    "holds",
    "mine",
    "piece_texts",
    "query_executor",
    "read_all",
    "read_error",
    "read_new",
]
