"""Early search: recall's search started on the caller's words while they are still speaking.

Pipecat's user aggregator consumes the transcriptions and writes the turn to the context only
when the turn ends; recall then has its latency budget (10 ms by default) for the archive.
:class:`RecallPrefetch`, placed before the user aggregator, sees the transcriptions first
and starts the search the turn will ask for (the same words: it builds the turn's query
from the context as it will be, with the caller's words as its last message), so the turn's
recall finds the answer ready, or well on its way, instead of starting it then.

The hand-over is :class:`PrefetchingArchive`, the archive with the searches started early,
handed to the step through its public hook (``RecallStep.use_early_searches``): a search
asked with exactly the words and scope of one started early (still running or finished,
started at most :data:`MAX_AGE_S` ago, the caller not forgotten since) is answered by it; any
other goes to the archive as before. The turn's recall, ranking and budget are unchanged.

Once the early search answers (with semantic recall: fused with the ranking by meaning of the
turn's query, as the turn fuses them), the searches the turn makes after it (a second search
on the first hits' names, the stated values' searches) start too, derived as the turn derives
them (:mod:`~pipecat_summarizer._recall.follow_ups`): the turn takes those ready as well.
Once they answered, the turn's work after them (the snippets chosen, the block's text) is done
too, on the context as it is with the caller's words as its last message, and kept with what
it depended on (:mod:`~pipecat_summarizer._recall.compose`): the turn uses it only when its
own inputs are the same, else chooses as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    LLMContextUserTurnFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.string import TextPartForConcatenation, concatenate_aggregated_text

from pipecat_summarizer._recall.compose import EarlyBlock, SearchKey
from pipecat_summarizer._recall.early_task import EarlySearch, with_replies
from pipecat_summarizer._recall.follow_ups import early_work, turn_query
from pipecat_summarizer._recall.gather import consume
from pipecat_summarizer._recall.query import MAX_QUERY_CHARS, ContextTerms, focus
from pipecat_summarizer._recall.search import loop_time, search_words
from pipecat_summarizer._recall.step import RecallStep

#: How long an early search's answer may serve a turn, from when it started (seconds, on the
#: loop's clock: a simulated-time loop's modelled time ages it, time.monotonic() would not): the
#: end of speech usually follows the final transcription within a second or two.
MAX_AGE_S = 5.0
#: Early searches kept for a turn to pick up (the latest ones; older ones are dropped): a
#: turn's words and their follow-ups (a second search, up to three values), twice over.
MAX_KEPT = 12
#: The caller's words kept of a turn still being spoken (its last characters): the turn's
#: query reads its last ``MAX_QUERY_CHARS``; reading the whole turn again on each of its
#: transcriptions cost O(turn^2) on the loop (4.5 s of CPU over a 125 KB turn in 500 parts).
KEPT_CHARS = 4 * MAX_QUERY_CHARS

_Key = SearchKey


class PrefetchingArchive:
    """A recall archive whose searches can be started before the turn asks for them.

    Everything but ``search`` is the wrapped archive's (``message``, ``messages_at``,
    ``forget_generation``, ...). It is also the recall step's source of early searches
    (:meth:`take`, see :class:`~pipecat_summarizer._recall.hooks.EarlySearches`).

    Args:
        archive: The archive searched (the call's store).
    """

    def __init__(self, archive: Any):
        """Wrap ``archive``."""
        self.archive = archive
        self._early: dict[_Key, EarlySearch] = {}
        # the follow-up work of early searches (see follow_ups.py): cancelled with them
        self._following: set[asyncio.Task] = set()
        #: Searches answered by an early one (counters, no conversation text).
        self.served = 0
        #: Searches started early.
        self.started = 0
        #: Follow-up searches (a turn's second and values' searches) started early, and served.
        self.follow_ups_started = 0
        self.follow_ups_served = 0
        # the turn's work after the search, done early (see compose.py): the latest one
        self._block: EarlyBlock | None = None
        # a turn went past taking the block: no early work starts until the next words;
        # the caller's words searched early so far, then when a turn last asked and when the
        # block kept was made: a turn passes or takes nothing newer than its own words
        self._passed = False
        self._words = self._asked = self._block_words = 0

    def __getattr__(self, name: str) -> Any:
        # only called for what this class lacks: the archive's other methods
        try:
            archive = self.__dict__["archive"]
        except KeyError:  # not initialized (a copy in the making)
            raise AttributeError(name) from None
        return getattr(archive, name)

    def _generation(self, user_id: str | None) -> int:
        generation = getattr(self.archive, "forget_generation", None)
        if user_id is None or not callable(generation):
            return 0
        return int(generation(user_id))

    def generation(self, user_id: str | None) -> int:
        """The archive's forget count for ``user_id`` (0 without a caller or a count)."""
        return self._generation(user_id)

    def keep_block(self, block: EarlyBlock) -> None:
        """Keep ``block`` for the turn (see :meth:`take_block`): it replaces the one kept."""
        self._block = block
        self._block_words = self._words

    def take_block(self) -> EarlyBlock | None:
        """The early work kept for the turn, taken (it serves one turn at most); the recall
        step uses it only when its inputs equal the turn's own (see
        :class:`~pipecat_summarizer._recall.compose.EarlyBlock`). A block made on words
        searched early after the turn asked is the next turn's: it stays."""
        if self._block_words > self._asked:
            return None
        block, self._block = self._block, None
        return block

    def turn_passed(self) -> None:
        """The turn found no early block it could use and does its work itself: the early
        work still under way is cancelled, and none starts until a turn's next words are
        searched early (:meth:`prefetch`); the follow-up searches it started run on (the
        turn takes them as its own). Early work on words searched after the turn asked
        (the caller already speaks the next turn) is the next turn's: it goes on."""
        if self._words != self._asked:
            return
        self._passed = True
        self._stop_following()

    def served_block(self, block: EarlyBlock) -> None:
        """The turn took ``block``'s follow-up answers: its early follow-up searches are
        taken as if the turn had asked for them (counted as served)."""
        for key in block.follow_ups:
            if self._early.pop(key, None) is not None:
                self.follow_ups_served += 1

    def in_flight(self) -> bool:
        """Whether an early search of a turn's words is still running (follow-ups aside: the
        next words' search need not wait for them)."""
        return any(not e.task.done() for e in self._early.values() if not e.follow_up)

    def running(
        self, query: str, *, user_id: str | None, call_id: str | None, limit: int, any_word: bool
    ) -> asyncio.Task | None:
        """The task of the usable early search of these words and scope (not taken)."""
        early = self._early.get((query, user_id, call_id, int(limit), bool(any_word)))
        if early is None or not self._usable(early, user_id, loop_time()):
            return None
        return early.task

    def prefetch(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
        replies: int = 0,
        then: Callable[[Sequence[Any]], Awaitable[None]] | None = None,
        follow_up: bool = False,
    ) -> bool:
        """Start ``search(query, ...)`` now, for a turn to pick up, and read the replies of
        its first ``replies`` hits after it (what the turn's recall reads with them); once
        it answers, ``then(hits)`` (the follow-up searches, see
        :func:`~pipecat_summarizer._recall.follow_ups.follow_ups`) unless
        the caller was forgotten meanwhile (``follow_up``: this is one of them). Returns
        False when the same search is already running or fresh (nothing started). A turn's
        words (not ``follow_up``) supersede the early work still running, which is cancelled,
        as is an early search evicted past :data:`MAX_KEPT`."""
        key: _Key = (query, user_id, call_id, int(limit), bool(any_word))
        now = loop_time()
        self._prune(now)
        if not follow_up:
            self._passed = False  # a turn's words: their early work is for the next turn
        early = self._early.get(key)
        if early is not None and self._usable(early, user_id, now):
            if then is not None and not follow_up:
                # the same words, another query (a word the search leaves out, "like?"):
                # the turn's work after the search is done again for it, not the last one
                self._stop_following()
                self._words += 1
                then_ = partial(self._then, then, user_id, early.generation, self._words)
                early.task.add_done_callback(then_)
            return False
        if not follow_up:
            self._supersede()
            self._words += 1
        store_search: Any = self.archive.search
        scope = {"user_id": user_id, "call_id": call_id, "limit": limit, "any_word": any_word}
        if replies > 0 and getattr(store_search, "reads_replies", False):
            # the store reads them in the search's own trip (as the turn's search would)
            search = store_search(query, _replies=replies, **scope)
            replies = 0
        else:
            search = store_search(query, **scope)
        task = asyncio.ensure_future(with_replies(self.archive, search, replies))
        task.add_done_callback(consume)
        generation = self._generation(user_id)
        if then is not None:
            task.add_done_callback(partial(self._then, then, user_id, generation, self._words))
        self._early.pop(key, None)
        self._early[key] = EarlySearch(task, now, generation, follow_up)
        while len(self._early) > MAX_KEPT:
            evicted = self._early.pop(next(iter(self._early)))
            if not evicted.task.done():  # no turn can take it any more: it must not run on
                evicted.task.cancel()
        if follow_up:
            self.follow_ups_started += 1
        else:
            self.started += 1
        return True

    def _supersede(self) -> None:
        """The turn's words changed (a newer final part): the early work still running for
        its earlier words goes, follow-ups included (the turn asks for the newest words; on
        a store serving one query at a time, stale searches would queue before its own).
        At most one early search of a turn's words, and its follow-ups, runs at a time;
        finished ones stay (an answer costs nothing to keep, and may still serve)."""
        for key, early in list(self._early.items()):
            if not early.task.done():
                del self._early[key]
                early.task.cancel()
        self._block = None  # made for the earlier words
        self._stop_following()

    def _stop_following(self) -> None:
        following, self._following = self._following, set()
        for task in following:
            task.cancel()

    def _then(
        self,
        then: Callable[[Sequence[Any]], Awaitable[None]],
        user_id: str | None,
        generation: int,
        words: int,
        task: asyncio.Task,
    ) -> None:
        # the early search answered: its follow-ups start, unless the hits came before a
        # forget of the caller (the words searched next would be the forgotten text's), a
        # turn went past them, or newer words were searched early (a block would be stale)
        if task.cancelled() or task.exception() is not None:
            return
        if self._generation(user_id) != generation or self._passed or words != self._words:
            return
        follow = asyncio.ensure_future(then(task.result()))
        self._following.add(follow)
        follow.add_done_callback(self._followed)

    def _followed(self, task: asyncio.Task) -> None:
        self._following.discard(task)
        consume(task)

    def _usable(self, early: EarlySearch, user_id: str | None, now: float) -> bool:
        return early.usable(now, self._generation(user_id), MAX_AGE_S)

    def take(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> Awaitable[Sequence[Any]] | None:
        """The answer of the early search of these words and scope, taken (each early
        search answers one turn), or ``None`` when there is no usable one. Should the early
        search fail, the answer is the archive's own search."""
        key: _Key = (query, user_id, call_id, int(limit), bool(any_word))
        self._asked = self._words
        early = self._early.pop(key, None)
        self._prune(loop_time())
        if early is None or not self._usable(early, user_id, loop_time()):
            return None
        if not early.follow_up and not early.task.done():
            # the turn waits for it: the work after it is the turn's own, not done twice
            self.turn_passed()
        return self._answer(early, key)

    def _prune(self, now: float) -> None:
        """Drop the early searches no turn may use any more: stale, or of a caller forgotten
        since (their answers hold the forgotten text: it must not stay in memory until the
        call ends)."""
        for key, early in list(self._early.items()):
            if early.stale(now, self._generation(key[1]), MAX_AGE_S):
                del self._early[key]
                if not early.task.done():
                    early.task.cancel()
        block = self._block
        if block is not None and (
            not block.fresh(now) or block.generation != self._generation(block.user_id)
        ):
            self._block = None  # the forgotten text goes from memory too

    async def _answer(self, early: EarlySearch, key: _Key) -> Sequence[Any]:
        try:
            found = await asyncio.shield(early.task)
        except asyncio.CancelledError:
            if not early.task.cancelled():
                early.task.cancel()  # the turn itself was cancelled: its search goes too
                raise
        except Exception:  # noqa: BLE001 - the early one failed: ask again
            pass
        else:
            if early.follow_up:
                self.follow_ups_served += 1
            else:
                self.served += 1
            return found
        query, user_id, call_id, limit, any_word = key
        return await self.archive.search(
            query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word
        )

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> Sequence[Any]:
        """The archive's search, answered by the early search of the same words and scope
        when there is a usable one (see :meth:`take`)."""
        answer = self.take(query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word)
        if answer is not None:
            return await answer
        return await self.archive.search(
            query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word
        )

    def clear(self) -> None:
        """Drop (and cancel) the early searches (the call is over)."""
        early, self._early = self._early, {}
        self._block = None
        for e in early.values():
            if not e.task.done():
                e.task.cancel()
        following, self._following = self._following, set()
        for task in following:
            task.cancel()


def prefetching_archive(step: RecallStep) -> PrefetchingArchive:
    """The step's archive as a :class:`PrefetchingArchive`, handed to the step as its source
    of early searches (once: two companions of one step share it). ``step.archive`` stays
    the store."""
    early = step.early_searches
    if isinstance(early, PrefetchingArchive):
        return early
    archive = PrefetchingArchive(step.archive)
    step.use_early_searches(archive)
    return archive


class RecallPrefetch(FrameProcessor):
    """Starts recall's search on the caller's words before their turn ends.

    Place it before the user aggregator (``[stt, RecallPrefetch(summarizer),
    pair.user(), summarizer, llm, ...]``): it passes every frame on at once and, on each
    final transcription (and on interim ones while no early search is running), starts the
    search the turn's recall will ask for (with semantic recall, its query is embedded
    then too). A summarizer without recall makes it a pass-through.

    Args:
        summarizer: The ``ContextSummarizer`` whose recall it serves (``recall=`` set).
        interim: Also search on interim transcriptions (at most one such search at a time).
        **kwargs: ``FrameProcessor``'s.
    """

    def __init__(self, summarizer: Any, *, interim: bool = True, **kwargs: Any):
        """Attach to ``summarizer``'s recall step."""
        super().__init__(**kwargs)
        step = getattr(summarizer, "recall_step", None)
        if step is not None and not isinstance(step, RecallStep):
            raise TypeError(f"summarizer.recall_step is a {type(step).__name__}")
        context = getattr(summarizer, "context", None)
        if context is None or not callable(getattr(context, "get_messages", None)):
            raise TypeError(
                "RecallPrefetch needs a ContextSummarizer (with .context and .recall_step), "
                f"got {type(summarizer).__name__}"
            )
        self._step = step
        self._context = context
        self._interim = bool(interim)
        self._archive = prefetching_archive(step) if step is not None else None
        self._parts: list[TextPartForConcatenation] = []
        self._terms = ContextTerms()
        # the context as the turn's recall will read it (its last block kept): the view
        # the early work judges against
        self._view = ContextTerms()
        self._worked: tuple[str, str] | None = None  # the words and query worked on last
        self._summarizer = summarizer
        self._misplaced = False  # said once: placed after the user aggregator

    @property
    def archive(self) -> PrefetchingArchive | None:
        """The recall step's archive with early searches (``None`` without recall)."""
        return self._archive

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Pass ``frame`` on, then start an early search on the caller's words."""
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if self._archive is None:
            return
        if isinstance(frame, TranscriptionFrame):
            if frame.text.strip():
                part = TextPartForConcatenation(
                    frame.text, includes_inter_part_spaces=frame.includes_inter_frame_spaces
                )
                self._parts.append(part)
                # the parts of the turn's last KEPT_CHARS characters, joined as the user
                # aggregator joins them (the parts themselves: a join of joins differs)
                while sum(len(p.text) for p in self._parts[1:]) >= KEPT_CHARS:
                    self._parts.pop(0)
                self._start(concatenate_aggregated_text(self._parts), final=True)
        elif isinstance(frame, InterimTranscriptionFrame):
            if self._interim and frame.text.strip() and not self._archive.in_flight():
                part = TextPartForConcatenation(
                    frame.text, includes_inter_part_spaces=frame.includes_inter_frame_spaces
                )
                self._start(concatenate_aggregated_text([*self._parts, part]), final=False)
        elif isinstance(frame, LLMContextUserTurnFrame):
            self._parts = []  # the aggregator wrote the turn: the next one starts empty
            self._worked = None
        elif (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.DOWNSTREAM
            and not self._misplaced
        ):
            # a context on its way to the LLM: this companion is after the user aggregator,
            # where the caller's words arrive as the turn ends (nothing to start early)
            self._misplaced = True
            logger.warning(
                f"{self}: placed after the user aggregator, it starts no search early; "
                "place RecallPrefetch before it ([stt, RecallPrefetch(summarizer), "
                "pair.user(), summarizer, ...])"
            )

    def _start(self, said: str, *, final: bool) -> None:
        step, archive = self._step, self._archive
        if step is None or archive is None or not step.params.enabled:
            return
        said = said[-KEPT_CHARS:]  # the turn's query reads its last MAX_QUERY_CHARS
        try:
            query = turn_query(step, self._context.get_messages(), said, self._terms)
            if query is None:
                return
            if step.semantic is not None:  # the ranking by meaning then only multiplies
                step.semantic.prepare_query(query)
            words = search_words(query, focus(query, self._terms.common()))
            if not words:
                return
            scope = {"user_id": step.user_id} if step.user_id else {"call_id": step.call_id}
            then = None
            if (words, query) != self._worked:
                # the same words and query again (a repeated final part): the work under way
                # serves (with semantic recall it ranks the query by meaning too)
                self._worked = (words, query)
                terms = focus(query, self._terms.common())
                then = partial(
                    early_work,
                    archive,
                    step,
                    self._summarizer,
                    self._view,
                    query,
                    terms,
                    words,
                    said,
                )
            archive.prefetch(
                words,
                limit=step.params.search_limit,
                any_word=True,
                replies=step.params.max_snippets + 2,  # as many as the turn's search reads
                then=then,
                **scope,
            )
        except Exception as e:  # an early search is a bonus: never the call's failure
            logger.warning(
                f"{self}: early recall search failed ({type(e).__name__}, final={final})"
            )

    async def cleanup(self) -> None:
        """Cancel the early searches still running."""
        await super().cleanup()
        if self._archive is not None:
            self._archive.clear()


__all__ = [
    "KEPT_CHARS",
    "MAX_AGE_S",
    "PrefetchingArchive",
    "RecallPrefetch",
    "prefetching_archive",
]
