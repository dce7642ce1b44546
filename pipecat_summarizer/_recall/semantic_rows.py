"""The rows of semantic recall's index
(:class:`~pipecat_summarizer._recall.semantic.SemanticIndex`): the embedded messages' state,
the archive's reads that feed it, and the worker threads that embed messages and queries off
the event loop; the indexing thread's pieces, each started when the turn gate lets it
(:mod:`~pipecat_summarizer._recall.turn_gate`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipecat_summarizer._recall.embedding import Embedder
from pipecat_summarizer._recall.turn_gate import TURNS, TurnGate
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


class Stale(PipecatSummarizerError):
    """The chunk being embedded no longer serves its index (the caller was forgotten, the
    call ended): its other pieces are not embedded."""


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
        Stale: ``live()`` turned false before a piece or during one (a pausable model's
            piece stops at its next pause).
    """
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    pausable = getattr(embedder, "pausable", False)

    def between() -> None:
        # a pausable piece's pause, at each half layer: an index gone meanwhile (its call
        # ended, its caller forgotten) stops the piece there, not after all its layers
        gate.step()
        if not live():
            raise Stale

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
            found = embedder.embed(piece, between=between)  # type: ignore[call-arg]
        else:
            found = embedder.embed(piece)
        vectors = np.asarray(found, dtype=np.float32)
        gate.piece_done(len(rows), time.thread_time() - began)
        if not live():
            # gone during the piece (a pausable one waits at its layers for the turns):
            # its vectors must not reach the cache after the forget emptied it
            raise Stale
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
    "Message",
    "SimilarityView",
    "Stale",
    "State",
    "as_message",
    "embed_into",
    "embed_pieces",
    "embedding_executor",
    "mine",
    "query_executor",
    "read_all",
    "read_error",
    "read_new",
]
