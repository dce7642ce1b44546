"""The recall step's searches of the archive, within the turn's budget.

:class:`ArchiveSearch` is what :class:`~pipecat_summarizer._recall.step.RecallStep` is built on:
one search per turn (never a second stacked on a slow archive), waited for within what the
budget leaves; a search that misses the budget may serve the next turn (the late answer); a
failing archive costs the recall, never the call (one WARNING per outage); a forget of the
caller drops what was found before it. The lexical search and the ranking by meaning run side
by side; a search that was started early (``RecallPrefetch``) is handed over through the
hooks (:class:`~pipecat_summarizer._recall.hooks.RecallHooks`). What is read around the hits
is :mod:`pipecat_summarizer._recall.gather`'s. The extra searches a turn makes after its first
(the gathered words' second search, the stated values' searches) start only when they are
expected to answer within what is left of the budget, by what they took lately in this call
(:class:`~pipecat_summarizer._recall.budget.ExtraCost`); so does the turn's ranking by
meaning when it would embed the query on the turn's path (no early embedding of these words):
a sentence model's query that never fits the budget's share is not started (S16-Q-1).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, cast

from loguru import logger

from pipecat_summarizer._recall.budget import RANK_RETRY, ExtraCost
from pipecat_summarizer._recall.gather import (
    Found,
    as_found,
    clipped,
    consume,
    second_search,
    wait_for_task,
    within,
)
from pipecat_summarizer._recall.hooks import RecallArchive, RecallHooks, notify
from pipecat_summarizer._recall.superseded import stated_values
from pipecat_summarizer._text.vocabulary import RECALL_STOPWORDS as STOPWORDS
from pipecat_summarizer._text.vocabulary import search_stem as stem
from pipecat_summarizer._text.vocabulary import words
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store.base import MemoryStore, error_reason

#: The share of the search's wait the ranking by meaning may take (the rest: the replies' read).
RANK_SHARE = 0.75
#: The loop turns a turn's forget watch gets past the deadline (see ``ArchiveSearch._watched``).
WATCH_TURNS = 3
#: The hits read for each value a corrected-values search asks (see ``ArchiveSearch._later``).
LATER_LIMIT = 10
#: How long an extra search the turn gave up on (gathered words, corrected values) may run on,
#: in latency budgets, before it is cancelled (see ``ArchiveSearch._let_go``).
LEFTOVER_BUDGETS = 1.0


def takes_replies(method: Any) -> bool:
    """Whether a store's ``search_noticing`` takes recall's ``_replies`` (the first hits'
    replies read with them): the backends' own do; another takes it if it names it or
    takes any keyword (an override passing ``**kwargs`` on to a backend's)."""
    if getattr(method, "one_trip", False):
        return True
    return _takes_replies(getattr(method, "__func__", method))


@functools.lru_cache(maxsize=64)
def _takes_replies(function: Any) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False
    return any(p.name == "_replies" or p.kind is p.VAR_KEYWORD for p in parameters)


def search_words(query: str, terms: Sequence[str] | None = None) -> str:
    """The words sent to the archive: the query's topic words, unstemmed (the archive stems
    in its own language), so a question's function words do not weigh in the ranking; only
    those whose stem is in ``terms`` when given."""
    seen: dict[str, None] = {}
    keep = set(terms) if terms is not None else None
    for w in words(query):
        if w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
            if keep is None or stem(w) in keep:
                seen.setdefault(w, None)
    return " ".join(seen)


class ArchiveSearch(RecallHooks):
    """One call's searches of its archive within the budget (see the module's docstring).

    Args:
        archive: Where archived messages are searched (the call's store).
        params: Recall params.
        call_id: This call's id.
        user_id: The caller: when set, their earlier calls are searched too; otherwise
            only this call.

    Raises:
        TypeError: If the archive has no ``search`` (or, for semantic recall, no
            ``calls``/``messages``/``message``), or ``params`` is not a ``RecallParams``.
    """

    def __init__(
        self,
        archive: RecallArchive,
        params: RecallParams,
        *,
        call_id: str | None,
        user_id: str | None = None,
    ):
        """Check the archive and the params."""
        super().__init__()
        if not isinstance(archive, RecallArchive):
            raise TypeError(f"recall needs an archive with search(), got {type(archive).__name__}")
        if not isinstance(params, RecallParams):
            raise TypeError(f"recall must be a RecallParams, got {type(params).__name__}")
        self.archive = archive
        self.params = params
        self.call_id = call_id
        self.user_id = user_id
        #: Semantic recall's embedded archive (``None`` unless ``params.semantic``).
        self.semantic: Any = None
        if params.semantic is not None:
            from pipecat_summarizer._recall.semantic import SemanticIndex

            for name in ("calls", "messages", "message"):
                if not callable(getattr(archive, name, None)):
                    raise TypeError(
                        f"semantic recall needs an archive with {name}() (a MemoryStore), "
                        f"got {type(archive).__name__}"
                    )
            self.semantic = SemanticIndex(params.semantic, call_id=call_id, user_id=user_id)
        self._inflight: asyncio.Task | None = None
        # extra searches a turn gave up on, cancelled later (see _let_go)
        self._leftovers: set[asyncio.Task] = set()
        self._failing = Outage()  # the archive's searches fail
        self._watch_failing = Outage()  # the turns' forget watch fails (see _watched)
        self._rank_failing = Outage()  # the ranking by meaning fails (the embedder: S17-A-5)
        # the store's forget count for this caller: when it moves, nothing found before
        # (a late answer, the placed message) is quoted again
        self._forget_gen = self._generation()
        # when this call started (wall clock, as the forget tombstones): a forget by another
        # process after it counts here too (see _search_with_replies)
        self._since = time.time()
        # counters (no conversation text): searches that missed the budget, failed
        self.missed = 0
        self.errors = 0
        #: Turns whose ranking by meaning was late: they went with the lexical hits alone.
        self.semantic_late = 0
        #: Turns that did not start their ranking by meaning: it would have embedded the
        #: query on the turn's path and was not expected to answer within its share of the
        #: budget (see ``_rank_fits``); they went with the lexical hits alone, at once.
        self.semantic_skipped = 0
        #: Turns that placed nothing because their forget watch had not answered in time.
        self.watch_late = 0
        #: Extra searches (a second search on the gathered words, a turn's stated values'
        #: searches) not started because they were not expected to answer in time (see
        #: ``ExtraCost``), and those started that did not answer in time (let go).
        self.extras_skipped = 0
        self.extras_let_go = 0
        # what each kind of extra search took lately in this call (see _extra_fits)
        self._extra_costs: dict[str, ExtraCost] = {"gather": ExtraCost(), "values": ExtraCost()}
        # what the turn's ranking by meaning took lately when it embedded its query in the
        # query thread (see _rank_fits)
        self._rank_cost = ExtraCost(every=RANK_RETRY)
        # the extra searches being measured: kind, start, and the time they had run when let
        # go (None: not let go)
        self._timing: dict[asyncio.Task, tuple[str, float, float | None]] = {}

    def _search(
        self,
        query: str,
        limit: int,
        terms: Sequence[str] | None,
        wait_s: float,
        *,
        watch: bool = True,
        turn: Sequence[asyncio.Future | None] = (),
        noticing: asyncio.Future | None = None,
    ) -> asyncio.Task:
        inner = self._search_with_replies(
            query, limit, terms, wait_s=wait_s, watch=watch, turn=turn, noticing=noticing
        )
        return asyncio.ensure_future(inner)

    async def _search_with_replies(
        self,
        query: str,
        limit: int,
        terms: Sequence[str] | None = None,
        *,
        semantic: bool = True,
        wait_s: float | None = None,
        watch: bool = True,
        turn: Sequence[asyncio.Future | None] = (),
        noticing: asyncio.Future | None = None,
    ) -> Found:
        """The hits, and the message that followed each of the first ones (the answer to a
        question, the rest of a story): one search, then one read per hit that can be
        recalled, all within the same budget. The ranking by meaning runs beside the search
        and joins when ready within :data:`RANK_SHARE` of ``wait_s``; a later one never
        costs the lexical hits (``semantic_late`` counts those turns); one not expected to
        be ready by then is not started (``semantic_skipped``, see :meth:`_rank_fits`).
        ``watch=False``: the caller reads the forget tombstone itself (a turn, beside its
        selection: see :meth:`_watch`), so the hits do not wait for that read; ``turn``
        then holds that watch by this coroutine's first step (the watch starts after the
        search's task).
        ``noticing`` (a turn's watch, in ``turn`` too): when this search is the archive's
        own, the watch is read in the search's trip (``MemoryStore.search_noticing``) and
        ``noticing`` gets its answer; when an early search answers, a watch of its own is
        started for it (:meth:`_watch`)."""
        scope = {"user_id": self.user_id} if self.user_id else {"call_id": self.call_id}
        generation = self._generation()
        index = self.semantic if semantic else None
        sent = search_words(query, terms)
        notify(self._observers, "on_search_started", sent)
        # a search started early of these very words (RecallPrefetch's) answers, if any
        early = self._early
        search = None if early is None else early.take(sent, limit=limit, any_word=True, **scope)
        # the first hits' replies: a few spare for the in-view filter
        first = self.params.max_snippets + 2
        if search is None and noticing is not None:
            # the turn's own search: its forget watch read in the same trip (S15-F-3)
            search = self._noticing_search(sent, limit, first, noticing)
        elif noticing is not None:
            # an early search answers: the watch makes its own trip, read now (never with
            # the early search: S14-R-1)
            _chain(self._watch(), noticing)
        if search is None:
            store_search: Any = self.archive.search
            if getattr(store_search, "reads_replies", False):
                # the store reads them with the search: one trip to it, not two
                search = store_search(sent, limit=limit, any_word=True, _replies=first, **scope)
            else:
                search = self.archive.search(sent, limit=limit, any_word=True, **scope)
        noticed = getattr(self.archive, "noticed_forget", None)
        # a forget run by another process: its tombstone is read beside the search (the rows
        # are gone already; what this call holds in memory must go too)
        watch_: Awaitable[bool] | None = None
        if watch and self.user_id is not None and callable(noticed):
            watch_ = noticed(self.user_id, self._since)
        # a turn's own watch (_hits put it in ``turn`` before this first step): the
        # ranking waits for it too, so the index drops a forgotten caller's rows first; the
        # turn itself checks it before placing (_watched), even when the ranking is late
        # the ranking by meaning starts only when it can join the turn (S16-Q-1): the
        # lexical search is not kept waiting for it, nor its CPU taken, for nothing
        ranks = index
        if index is not None and wait_s is not None and not self._rank_fits(index, query, wait_s):
            ranks = None
        shared = turn[0] if turn and watch_ is None and ranks is not None else None

        async def rank() -> tuple[list, Mapping] | None:
            # by meaning (a sentence model embeds the query in its own thread, ~20 ms of
            # CPU): beside the lexical search, not after it, once a forget has been seen
            if watch_ is not None:
                await watch_
            elif shared is not None:
                # waited, never cancelled from here; its failure is the turn's to judge
                await asyncio.wait({shared})
            if ranks is None:
                return None
            try:
                ranked = await ranks.rank_soon(query, timed=self._rank_measured)
            except Exception as e:
                # an application's embedder that raises or answers rows of another width (a
                # service down): the turn goes with its lexical hits (S17-A-5)
                self._rank_failing.began(
                    f"recall (call {self.call_id}): ranking by meaning failed "
                    f"({type(e).__name__}); turns go with the words' hits until it answers"
                )
                return None
            self._rank_failing.ended(
                f"recall (call {self.call_id}): ranking by meaning works again"
            )
            return ranked

        started = loop_time()
        # nothing to rank and no watch to wait for: no task beside the search
        ranking = None if ranks is None and watch_ is None else asyncio.ensure_future(rank())
        try:
            found = await search
        except BaseException:
            if ranking is not None:
                ranking.add_done_callback(consume)
            raise
        if ranking is None:
            ranked = None
        elif ranks is not None and wait_s is not None:
            ready, ranked = await within(ranking, started + RANK_SHARE * wait_s)
            self.semantic_late += not ready
        else:
            ranked = await ranking  # the forget watch alone: awaited in full, as ever
        try:  # fused with the ranking by meaning, the first hits' replies read, clipped
            out = await as_found(self.archive, found, sent, first, ranked=ranked, index=index)
        finally:
            if index is not None:
                # what was archived since the last turn: read and embedded in the
                # background, after this turn's reads (a store serves its queries in turn)
                index.kick(self.archive)
        if self._generation() != generation:
            return [], {}  # the caller was forgotten while the archive answered
        return out  # each text clipped: a 30 KB tool result is read in part

    def _noticing_search(
        self, sent: str, limit: int, first: int, noticing: asyncio.Future
    ) -> Awaitable[Any]:
        """The archive's search of ``sent`` by the caller, its forget watch read in the
        same trip (see :meth:`_one_trip`): the hits; ``noticing`` gets the watch's answer
        (or the trip's failure, or its cancellation). Awaited in the search's own task (a
        task of its own would cost the answer one more loop turn)."""
        assert self.user_id is not None
        user_id, since = self.user_id, self._since

        async def hits() -> Any:
            try:
                method = self.archive.search_noticing  # type: ignore[attr-defined]
                # the first hits' replies with the hits, where the method reads them
                extra = {"_replies": first} if takes_replies(method) else {}
                found, noticed = await method(
                    sent, user_id=user_id, since=since, limit=limit, any_word=True, **extra
                )
            except asyncio.CancelledError:
                noticing.cancel()
                raise
            except BaseException as e:
                if not noticing.done():
                    noticing.set_exception(e)
                raise
            if not noticing.done():
                noticing.set_result(noticed)
            return found

        return hits()

    def _one_trip(self) -> bool:
        """Whether a turn's forget watch may be read in its own search's trip: the archive
        does that in one trip (both backends' ``search_noticing``) with its own search (not
        an override of it), or its class has a ``search_noticing`` of its own (an
        application's audit or filter over a backend's, a store of another kind doing the
        two reads its way: its word, called as it is); and no ranking by meaning waits for
        the watch (it runs beside the search, after the watch)."""
        method = getattr(self.archive, "search_noticing", None)
        if (
            self.user_id is None
            or self.semantic is not None
            or method is None
            or not callable(getattr(self.archive, "noticed_forget", None))
        ):
            return False
        if getattr(method, "one_trip", False):
            # the backend's own search (an override of it, a test's slow store or an
            # application's, is what the turn must call: it has no such mark)
            return bool(getattr(self.archive.search, "reads_replies", False))
        # the base class's default makes the two calls anyway: the turn makes them itself
        return getattr(method, "__func__", method) is not MemoryStore.search_noticing

    def _result(self, task: asyncio.Task) -> Found:
        """A finished search's hits and replies; a failure costs the recall, never the call."""
        if task.cancelled():
            return [], {}
        error = task.exception()
        if error is None:
            self._failing.ended(f"recall (call {self.call_id}): the archive answers again")
            return task.result()
        self.errors += 1
        self._failing.began(
            f"recall (call {self.call_id}): archive search failed "
            f"({type(error).__name__}); turns go without recall until it answers"
        )
        return [], {}

    async def hits_for_turn(
        self,
        query: str,
        terms: Sequence[str] | None = None,
        *,
        wait_s: float | None = None,
    ) -> tuple[Found, str]:
        """The hits for this turn's query, within the latency budget (or ``wait_s``, what
        is left of it for the search).

        Returns:
            ``((hits, replies), how)``: ``how`` is ``"on_time"``, ``"late"`` (a previous turn's late
            answer, still relevant to this query), ``"missed"`` or ``"busy"`` (the
            previous search is still running: no second search is stacked on a slow
            archive).
        """
        found, how, _ = await self._hits(query, terms, wait_s, watch=True)
        return found, how

    async def _turn_hits(
        self, query: str, terms: Sequence[str] | None, wait_s: float
    ) -> tuple[Found, str, asyncio.Future | None]:
        """:meth:`hits_for_turn`, and the turn's forget watch (see :meth:`_watch`): the
        caller's tombstone is read beside the search (started after it, so a search at turn
        time is not queued behind it), not awaited: the turn awaits it before placing."""
        return await self._hits(query, terms, wait_s, watch=False)

    async def _hits(
        self, query: str, terms: Sequence[str] | None, wait_s: float | None, *, watch: bool
    ) -> tuple[Found, str, asyncio.Future | None]:
        late: Found = ([], {})
        self.forgotten()  # a late answer from before a forget is dropped
        self.drop_leftovers()  # a new turn's searches are not queued behind them
        previous = self._inflight
        if previous is not None:
            if not previous.done():
                self.missed += 1
                return ([], {}), "busy", None
            self._inflight = None
            late = self._result(previous)
        budget = self.params.latency_budget_s if wait_s is None else wait_s
        turn: list[asyncio.Future | None] = []  # the watch, read at the search's first step
        # the watch read in the turn's own search's trip (one trip, not two)
        noticing = None
        if not watch and self._one_trip():
            noticing = asyncio.get_running_loop().create_future()
            noticing.add_done_callback(consume)  # type: ignore[arg-type]
        limit = self.params.search_limit
        task = self._search(query, limit, terms, budget, watch=watch, turn=turn, noticing=noticing)
        if noticing is not None:
            turn.append(noticing)
            # a search cancelled before its trip started (a forget, the call's end) answers
            # no watch: the turn places nothing
            task.add_done_callback(lambda t: noticing.cancel() if t.cancelled() else None)
        elif not watch:
            turn.append(self._watch())
        watched = turn[0] if turn else None
        if not task.done() and budget > 0:
            await wait_for_task(task, budget)
        if task.done():
            return self._result(task), "on_time", watched
        self.missed += 1
        self._inflight = task  # may serve the next turn
        task.add_done_callback(consume)
        if late[0]:
            serial = getattr(getattr(self.archive, "search_noticing", None), "serial", False)
            if noticing is not None and not noticing.done() and not serial:
                # a previous turn's late answer serves this turn, whose own search (and the
                # watch read in its trip) is late: the late answer's watch is read now, a
                # trip of its own (never earlier: S14-R-1); where trips run one at a time
                # (SQLite's thread) it would answer after that search anyway
                watched = self._watch()
            return late, "late", watched
        return ([], {}), "missed", watched

    def _generation(self) -> int:
        generation = getattr(self.archive, "forget_generation", None)
        if self.user_id is None or not callable(generation):
            return 0
        return int(generation(self.user_id))

    @property
    def since(self) -> float:
        """When this call started (the wall clock), the key the forget watch passes to
        ``noticed_forget``: the caller's tombstone read then is the call's baseline."""
        return self._since

    def forgotten(self) -> bool:
        """True once after the caller was forgotten (``MemoryStore.forget``) since the last
        check: the late answer still running is dropped, and the caller must take the placed
        message out (it quotes the forgotten text)."""
        now = self._generation()
        if now == self._forget_gen:
            return False
        self._forget_gen = now
        task, self._inflight = self._inflight, None
        if task is not None and not task.done():
            task.cancel()
        return True

    def _watch(self) -> asyncio.Task | None:
        """A turn's forget watch, started now: the caller's tombstone read (a forget run by
        another process; this process's own are counted as they run), awaited only before
        the block is placed (:meth:`_watched`), so hits an early search has ready go to the
        selection without that trip. ``None``: no caller, or an archive without
        tombstones."""
        noticed = getattr(self.archive, "noticed_forget", None)
        if self.user_id is None or not callable(noticed):
            return None
        task = asyncio.ensure_future(noticed(self.user_id, self._since))
        task.add_done_callback(consume)
        return task

    async def _watched(self, watch: asyncio.Future, generation: int, until: float) -> bool:
        """Whether the turn's block may be placed: its forget watch answered by ``until``
        (the loop's clock) and the caller was not forgotten since the turn's ``generation``.
        A watch that failed or is late places nothing (a forget may be unseen); it is left
        to run, so a forget it finds still counts."""
        if not watch.done():
            await wait_for_task(cast(asyncio.Task, watch), max(0.0, until - loop_time()))
        for _ in range(WATCH_TURNS):
            if watch.done():
                break
            # an answer the store has sent is read in a loop turn or two: the selection
            # held the loop, and a deadline passed already would otherwise drop it
            await asyncio.sleep(0)
        if not watch.done() or watch.cancelled():
            self.watch_late += not watch.done()
            return False
        error = watch.exception()
        if error is not None:
            self.errors += 1
            self._watch_failing.began(
                f"recall (call {self.call_id}): reading the forget tombstone failed "
                f"({error_reason(error)}); turns place no recall until it answers"
            )
            return False
        self._watch_failing.ended(
            f"recall (call {self.call_id}): the forget tombstone is read again"
        )
        return self._generation() == generation

    async def _gather(
        self, gathered: Sequence[str], hits: Sequence[Any], wait_s: float, *, watch: bool = True
    ) -> Found:
        # the second search, without recall by meaning (see gather.second_search); given up
        # on at the deadline, it is let go (_let_go), not cancelled there. Not started when
        # the archive's own search of these words is not expected to answer in ``wait_s``
        limit = self.params.search_limit
        words_ = " ".join(gathered)
        own = not self._early_running(search_words(words_), limit, any_word=True)
        if own and not self._extra_fits("gather", wait_s):
            return [], {}

        def search(words_: str) -> Awaitable[Found]:
            inner = self._search_with_replies(words_, limit, semantic=False, watch=watch)
            task = asyncio.ensure_future(inner)
            if own:
                self._timed("gather", task)
            return self._unhurried(task)

        return await second_search(search, self._result, gathered, hits, wait_s)

    def _early_running(self, words_: str, limit: int, *, any_word: bool) -> bool:
        """Whether an early search (``RecallPrefetch``'s) of exactly these words and this
        call's scope is under way or answered: the turn takes it, at no cost of its own."""
        running = getattr(self._early, "running", None)
        if not callable(running):
            return False
        user, call = (self.user_id, None) if self.user_id else (None, self.call_id)
        task = running(words_, user_id=user, call_id=call, limit=limit, any_word=any_word)
        return task is not None

    def _extra_fits(self, kind: str, left_s: float) -> bool:
        """Whether an extra search of ``kind`` the turn would start itself is expected to
        answer within ``left_s`` (see ``ExtraCost``); if not, it is not started, and is
        counted in ``extras_skipped``."""
        cost = self._extra_costs[kind]
        if cost.fits(left_s):
            self._extra_costs[kind] = cost.started()
            return True
        self._extra_costs[kind] = cost.skipped()
        self.extras_skipped += 1
        return False

    def _rank_fits(self, index: Any, query: str, wait_s: float) -> bool:
        """Whether the turn starts its ranking by meaning of ``query``: always when it costs
        no embedding on the turn's path (``SemanticIndex.cheap``: the prefetch embedded these
        words, a fast model, nothing to rank yet); else when the rankings measured lately
        (:meth:`_rank_measured`) are expected to answer within its share of the wait,
        :data:`RANK_SHARE` of ``wait_s``, as an extra search is (``ExtraCost``: the first
        ones are started and measured, and one is retried every
        :data:`~pipecat_summarizer._recall.budget.RANK_RETRY` turns not started, so a
        faster machine or a warmed model gets back in). One not started is counted in
        ``semantic_skipped``: that turn goes with its lexical hits, without waiting."""
        if index.cheap(query):
            return True
        cost = self._rank_cost
        if cost.fits(RANK_SHARE * wait_s):
            self._rank_cost = cost.started()
            return True
        self._rank_cost = cost.skipped()
        self.semantic_skipped += 1
        return False

    def _rank_measured(self, seconds: float) -> None:
        """A ranking that embedded its query in the query thread took ``seconds`` (see
        :meth:`_rank_fits`); one that ended after its turn gave up counts too, when it ends."""
        self._rank_cost = self._rank_cost.measured(seconds)

    def _timed(self, kind: str, task: asyncio.Task) -> None:
        """Measure ``task`` (an extra search of ``kind`` started now) for ``_extra_fits``:
        when it ends (answered, failed or cancelled: then the time it ran); let go, at once
        with the time it ran so far (see :meth:`_let_go`), revised when it ends."""
        self._timing[task] = (kind, loop_time(), None)

        def ended(done: asyncio.Task) -> None:
            kind_, started, bound = self._timing.pop(done)
            took = loop_time() - started
            cost = self._extra_costs[kind_]
            revised = cost.measured(took) if bound is None else cost.revised(bound, took)
            self._extra_costs[kind_] = revised

        task.add_done_callback(ended)

    async def _later(self, hits: Sequence[Any], until: float) -> list[Any]:
        """The caller's archived messages that state a value the first ``hits`` state (a
        correction made in a later call, "make that 21 March, not 14 March", may share no
        other word with the question), by ``until`` (the loop's clock: reading the values
        comes out of the wait): nothing when late (let go, see :meth:`_let_go`). The searches
        the turn would start itself are not started when they are not expected to answer
        by then (see ``ExtraCost``): only those started early are taken, if any."""
        values = stated_values(hits[: self.params.max_snippets])
        if not values or loop_time() >= until:
            return []
        scope = {"user_id": self.user_id} if self.user_id else {"call_id": self.call_id}
        generation = self._generation()

        # the same searches started early (RecallPrefetch's follow-ups) are taken; the others
        # the turn starts itself, only when they are expected to answer in time (the marks
        # they would bring are lost either way when they do not)
        early = self._early
        own = [v for v in values if not self._early_running(v, LATER_LIMIT, any_word=False)]
        if own and not self._extra_fits("values", until - loop_time()):
            values = [v for v in values if v not in own]
            own = []
            if not values:
                return []

        def ask(value: str) -> Awaitable[Sequence[Any]]:
            if early is not None:
                taken = early.take(value, limit=LATER_LIMIT, any_word=False, **scope)
                if taken is not None:
                    return taken
            return self.archive.search(value, limit=LATER_LIMIT, **scope)

        async def search() -> list[Any]:
            for v in values:
                notify(self._observers, "on_search_started", v)
            asked = [ask(v) for v in values]
            return [h for found in await asyncio.gather(*asked) for h in found]

        task = asyncio.ensure_future(search())
        if own:
            self._timed("values", task)
        await wait_for_task(task, max(until - loop_time(), 0.0))
        if not task.done():
            self._let_go(task)
            return []
        if task.cancelled() or task.exception() is not None or self._generation() != generation:
            return []  # a failing archive costs the marks, never the turn
        return clipped((task.result(), {}), values)[0]

    async def _unhurried(self, task: asyncio.Task) -> Found:
        """``task``'s result; cancelled, the wait ends at once and ``task`` is let go
        (:meth:`_let_go`)."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._let_go(task)
            raise

    def _let_go(self, task: asyncio.Task) -> None:
        """An extra search the turn no longer waits for: left to end on its own, and
        cancelled only :data:`LEFTOVER_BUDGETS` latency budgets later, or when the next
        turn searches (:meth:`drop_leftovers`), whichever is first. Cancelling at the
        deadline cost the frame the cancellation's own work: on PostgreSQL, asyncpg opens a
        connection to send the cancel request (1-6 ms of the loop's time each, past the
        deadline: benchmarks/frame_bound.py); a search nearly done is cheaper let finish."""
        task.add_done_callback(consume)
        if task.done():
            return
        self.extras_let_go += 1
        timing = self._timing.get(task)
        if timing is not None and timing[2] is None:
            # it did not answer in time: that counts now, whenever it ends (see _timed)
            kind, started, _ = timing
            bound = loop_time() - started
            self._timing[task] = (kind, started, bound)
            self._extra_costs[kind] = self._extra_costs[kind].measured(bound)
        self._leftovers.add(task)
        task.add_done_callback(self._leftovers.discard)
        grace = LEFTOVER_BUDGETS * self.params.latency_budget_s
        asyncio.get_running_loop().call_later(grace, task.cancel)

    def drop_leftovers(self) -> None:
        """Cancel the extra searches let go (:meth:`_let_go`) still running: the next
        turn's searches, or the call's end, do not wait behind them."""
        leftovers, self._leftovers = self._leftovers, set()
        for task in leftovers:
            task.cancel()

    @property
    def min_similarity(self) -> float | None:
        """The least similarity a hit by meaning needs: ``None`` without semantic recall."""
        semantic = self.params.semantic
        return None if self.semantic is None or semantic is None else semantic.min_similarity


def _chain(source: asyncio.Future | None, target: asyncio.Future) -> None:
    """``target`` gets ``source``'s outcome (its result, failure or cancellation) when it
    ends; no ``source`` (no watch to read): ``target`` answers ``False`` now."""
    if source is None:
        target.set_result(False)
        return

    def copy(done: asyncio.Future) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class Outage:
    """One WARNING when a failure begins and one INFO when it ends, whatever comes between
    (the messages never hold conversation text)."""

    def __init__(self) -> None:
        """No failure yet."""
        self.on = False

    def began(self, warning: str) -> None:
        """A failure: the WARNING, unless this outage said it already."""
        if not self.on:
            self.on = True
            logger.warning(warning)

    def ended(self, info: str) -> None:
        """A success: the INFO, if an outage was under way."""
        if self.on:
            self.on = False
            logger.info(info)


def loop_time() -> float:
    """The running loop's clock, on which the budget is waited (a simulated-time loop
    governs both)."""
    return asyncio.get_running_loop().time()


__all__ = ["LATER_LIMIT", "RANK_SHARE", "ArchiveSearch", "loop_time", "search_words"]
