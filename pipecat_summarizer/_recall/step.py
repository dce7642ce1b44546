"""The per-turn recall step: asks the archive within the turn's latency budget.

:class:`RecallStep` is the thin asyncio shell around the rules of
:mod:`pipecat_summarizer._recall.rules`. ``ContextSummarizer`` owns one when it has a store and
``recall=RecallParams(...)``; the ``recall_memory`` tool uses the same step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any

from loguru import logger

from pipecat_summarizer._recall.budget import (
    MIN_RECALL_TOKENS,
    Margin,
    Reserves,
    fits,
    planned_budget,
    ran_over,
    recall_budget,
    search_wait,
)
from pipecat_summarizer._recall.compose import (
    EarlyBlock,
    choose,
    labels,
    render,
    searched,
    viewed,
)
from pipecat_summarizer._recall.gather import (
    Found,
    consume,
    wait_for_task,
    with_gathered,
)
from pipecat_summarizer._recall.hooks import (
    RecallArchive,
    RecallObserver,
    RecallOutcome,
    observe_lookup,
    observe_turn,
)
from pipecat_summarizer._recall.query import (
    ContextTerms,
    asks_when,
    focus,
    gathers,
    latest_user_index,
    recall_query,
    topic_terms,
)
from pipecat_summarizer._recall.render import (
    place_recall,
    recall_message,
    snippet_when,
    speaker,
    window,
    without_recall,
)
from pipecat_summarizer._recall.search import ArchiveSearch, search_words
from pipecat_summarizer._recall.search import loop_time as _now
from pipecat_summarizer._recall.select import (
    Snippet,
    View,
    block_cap,
    gather_words,
    select_hits,
)
from pipecat_summarizer._recall.turn_gate import TURNS
from pipecat_summarizer._text.tokens import estimate_text_tokens as estimate_tokens
from pipecat_summarizer.params import RecallParams


class RecallStep(ArchiveSearch):
    """Recall for one call: the turn's recalled message, and the ``recall_memory`` tool's
    answer, from the archive searched within the budget (:class:`ArchiveSearch`).

    Args:
        archive: Where archived messages are searched (the call's store).
        params: Recall params.
        call_id: This call's id (its own archived messages are labelled by turn).
        user_id: The caller: when set, their earlier calls are searched too; otherwise
            only this call.
        count: Token counter for a text.
        settle: Writes what is still queued for the archive, within a timeout (the call's
            writer's ``flush``): awaited before a ``recall_memory`` search, so a message
            that left the context moments ago is found.
        now: The conversation's clock (the recorder's ``now``: the date the application
            gave, ``MemoryParams.conversation_started_at``), for "three weeks ago" in the
            labels of a question about time. Default: the wall clock.
    """

    def __init__(
        self,
        archive: RecallArchive,
        params: RecallParams,
        *,
        call_id: str | None,
        user_id: str | None = None,
        count: Callable[[str], int] = estimate_tokens,
        settle: Callable[[float], Awaitable[bool]] | None = None,
        now: Callable[[], float] = time.time,
    ):
        """Create the step."""
        super().__init__(archive, params, call_id=call_id, user_id=user_id)
        self.count = count
        self._settle = settle
        self.now = now
        #: The recalled message now in the context (replaced each turn).
        self.message: dict | None = None
        # counters (no conversation text): turns asked, recalled, served by a late answer
        # (the searches' own, missed and errors, are ArchiveSearch's)
        self.turns = 0
        self.recalled = 0
        self.late_served = 0
        #: Turns whose block was chosen and rendered (``early_blocks``), or chosen only
        #: (``early_choices``: less room, or a label of a question about time changed),
        #: before the turn ended (``RecallPrefetch``'s early work, on the turn's inputs).
        self.early_blocks = 0
        self.early_choices = 0
        # what the work after the search took lately: kept out of the waits and of the
        # selection's time (see Reserves)
        self._reserves = Reserves()
        # what the plan keeps back of the budget, learned from the frames that ran past it
        # (told by frame_ended once the frame is pushed on; _planned: this turn searched)
        self._margin = Margin()
        self._planned = False
        # the context's words, kept from turn to turn: a turn reads only its new messages
        self._context = ContextTerms()

    @property
    def margin_s(self) -> float:
        """What the step keeps back of its latency budget now for the frame's time it cannot
        see or stop, learned from this call's frames (see ``budget.Margin``)."""
        return self._margin.of(self.params.latency_budget_s)

    @property
    def messages_read(self) -> int:
        """How many context messages' text recall has read in this call (each once while
        it stays in the context: a turn reads what is new since the last)."""
        return self._context.read

    # -- the turn -------------------------------------------------------------------------

    def start(self) -> None:
        """The call starts: index the caller's earlier calls for semantic recall now, so a
        returning caller's first question already finds them by meaning."""
        self._since = time.time()
        if self.semantic is not None:
            self.semantic.kick(self.archive)

    def without_message(self, messages: Sequence[Any]) -> list[Any] | None:
        """``messages`` without the recalled message now placed (by identity: a caller's
        turn that reads like one is the caller's), or ``None`` if it is not there."""
        return without_recall(messages, self.message)

    async def prepare(
        self,
        messages: Callable[[], Sequence[Any]],
        view_texts: Callable[[], Iterable[str]],
        *,
        room: Callable[[], int | None] = lambda: None,
        started: float | None = None,
    ) -> list[Any] | None:
        """The context with this turn's recalled message placed, or ``None`` (nothing to
        recall, no room for it, or no answer within the budget).

        Args:
            messages: Returns the context as it is now (read again after the search: a
                summary may have been spliced in meanwhile).
            view_texts: The texts the model already sees besides the context messages
                (summary, pinned facts); called only when there are hits.
            room: Returns the tokens the recalled text may take besides ``max_tokens``
                (what the request ceiling leaves), or ``None`` for no limit; asked before
                the search and again before rendering.
            started: When the frame reached the processor (the running loop's ``time()``): the
                latency budget counts from there. Defaults to now.
        """
        started = _now() if started is None else started
        run = partial(self._prepare, messages, view_texts, room, started)
        # on its way until its block is placed or let go: the process's indexing thread
        # starts no piece meanwhile (S16-G-1), up to its cap
        searched = self.turns
        try:
            with TURNS.turn():
                if not self._observers:
                    return await run([0, 0])
                budget = self.params.latency_budget_s
                late = lambda: _now() - started > budget  # noqa: E731 (one line, as before)
                return await observe_turn(self, self._observers, run, late)
        finally:
            # a turn without a search says nothing of the plan
            self._planned = self.turns != searched

    def frame_ended(self, started: float) -> None:
        """The frame whose turn :meth:`prepare` served, reaching the processor at
        ``started`` (the running loop's ``time()``), was pushed on: if its turn searched,
        the margin learns whether the frame ran past the budget (its time after the step
        too: placing the block, pushing the frame, the pipeline's observers)."""
        if not self._planned:
            return
        self._planned = False
        budget = self.params.latency_budget_s
        self._margin = self._margin.after(budget, ran_over(budget, _now() - started))

    async def _prepare(
        self,
        messages: Callable[[], Sequence[Any]],
        view_texts: Callable[[], Iterable[str]],
        room: Callable[[], int | None],
        started: float,
        tally: list[int],
    ) -> list[Any] | None:
        params = self.params
        before = messages()
        context = self._context
        context.update(before)
        query = recall_query(before, params.max_question_words, context.names())
        if query is None or not fits(room()):
            if self.semantic is not None:  # no search this turn: index meanwhile ("Hi again")
                self.semantic.kick(self.archive)
            return None
        asking = before[latest_user_index(before)]  # type: ignore[index]
        terms = focus(query, context.common())
        self.turns += 1
        # the budget bounds the frame's time here, not only the search: what ran before the
        # search and what must run after it come out of it too. The search waits until the
        # reserve for the work after it that the deadline cannot cut (reading the context,
        # placing the block); the selection then judges hits until the deadline (a search
        # answering late leaves the first strong matches, not nothing)
        planned = planned_budget(params.latency_budget_s, self._margin.seconds)
        wait = search_wait(planned, _now() - started, self._reserves.wait)
        until = _now() + wait
        # the forget watch runs beside the search and the selection (ranking by meaning
        # waits for it, as ever): a search started early costs no store trip before them;
        # the block is placed only once it has answered (a late ranking never skips it)
        generation = self._generation()
        (hits, replies), how, watch = await self._turn_hits(query, terms, wait)
        tally[0] = len(hits)
        if not hits:
            return None
        # the turn's work after the search done early (RecallPrefetch's), if it was done on
        # these very hits: its follow-up searches' answers are the ones this turn would
        # take, and its choice serves if the context is still the one it was made on
        early = self._early_block(how, searched(query, terms, (hits, replies)))
        more: Found = ([], {})
        gathered: list[str] = []
        later: list[Any] = []
        if early is not None:
            gathered, more, later = early.gathered, early.more, early.later
            tally[0] += len(more[0])
        else:
            # the extra searches (gathered words, corrected values) only take what the
            # whole work after the search leaves; every wait of theirs ends at one moment,
            # so the work between them (reading the values to search) comes out of it too
            extra = min(until, started + planned - min(self._reserves.extra, planned / 2))
            if params.gather and how == "on_time":
                gathered = gather_words(hits, query, terms, params.min_score)
                left = extra - _now()
                if gathered and left > 0:  # only with time left in the turn's budget
                    until = extra
                    more = await self._gather(gathered, hits, left, watch=watch is None)
                    tally[0] += len(more[0])
            # a value the hits state may have been corrected in a later call: searched when
            # the question asks about time or gathers (each such search costs ~2-3 ms)
            if how == "on_time" and (asks_when(query) or gathers(query)) and _now() < extra:
                until = extra
                later = await self._later([*hits, *more[0]], extra)
        # a wait that ran to its end resumed a little after it (the loop's timer, the
        # interpreter's lock): measured from its end, the reserves cover that too
        found = min(_now(), until)
        current = list(messages())
        at = latest_user_index(current)
        if at is None or current[at] is not asking:
            return None  # the turn moved on while the archive answered
        context.update(current)
        texts = list(view_texts())  # the summary and pinned facts: corrections included
        if early is not None and early.viewed != viewed(context, texts):
            early = None  # made on another context (a summary spliced, a fact pinned...)
        # the frame's time bounds what runs after the search: hits are judged best first
        # until the deadline, and what is chosen by then is placed
        deadline = started + planned
        choose_by = deadline - min(self._reserves.select, planned / 2)
        picking = _now()
        if early is not None:
            snippets, size = early.snippets, early.size
        else:
            snippets, size = choose(
                (hits, replies),
                query,
                terms,
                context,
                texts,
                params,
                how=how,
                gathered=gathered,
                more=more,
                later=later,
                min_similarity=self.min_similarity,
                deadline=choose_by,
                clock=_now,
            )
        chosen = _now()
        budget = recall_budget(size, room())
        if budget is None:
            return None  # the conversation grew meanwhile: recall gives way
        now = self.now()
        if (
            early is not None
            and early.budget == budget
            and (not early.labels or early.labels == labels(snippets, query, self.call_id, now))
        ):
            text = early.text
            self.early_blocks += 1
        else:
            text = render(
                snippets,
                query,
                params,
                budget=budget,
                call_id=self.call_id,
                count=self.count,
                texts=texts,
                now=now,
                deadline=deadline,
                clock=_now,
            )
            self.early_choices += early is not None
        if text is None:
            self._measured(found, picking, chosen)
            return None
        message = recall_message(text)
        placed = place_recall(current, message, self.message)
        self._measured(found, picking, chosen)
        if watch is not None and not await self._watched(watch, generation, deadline):
            return None  # forgotten meanwhile (or not known in time): nothing is placed
        if placed is None:
            return None
        self.message = message
        tally[1] = len(snippets)
        self.recalled += 1
        self.late_served += how == "late"
        return placed

    def _early_block(self, how: str, searched: tuple) -> EarlyBlock | None:
        """The early work (``RecallPrefetch``'s) done on exactly these ``searched`` inputs
        (query, terms, hits, replies), taken, if any is fresh and the caller was not
        forgotten since (the turn's own forget watch still gates placing)."""
        early = self._early
        take = getattr(early, "take_block", None)
        if how != "on_time" or take is None:
            return None
        block: EarlyBlock | None = take()
        if (
            block is None
            or not block.fresh(_now())
            or block.generation != self._generation()
            or block.searched != searched
        ):
            # the turn chooses and renders itself: early work still under way (its choice
            # and rendering, 1-4 ms on the loop) would hold the turn's frame past its
            # deadline for a block no turn takes; its follow-up searches run on for the turn
            getattr(early, "turn_passed", lambda: None)()
            return None
        getattr(early, "served_block", lambda _: None)(block)  # its follow-ups: taken
        return block

    def _measured(self, found: float, picking: float, chosen: float) -> None:
        # measured, not guessed: what the next turn keeps back of its budget
        self._reserves = self._reserves.measured(
            found, picking, chosen, _now(), cap_s=self.params.latency_budget_s
        )

    # -- the tool -------------------------------------------------------------------------

    async def lookup(self, query: str, *, max_snippets: int | None = None) -> list[dict]:
        """What the ``recall_memory`` tool returns for the LLM's own query: the best
        snippets (no "in view" filter: the model asked), each ``{when, speaker, text}``,
        within the recall budget. Waits at most ``tool_timeout_s``.

        Raises:
            TimeoutError: If the archive did not answer in time.
        """
        run = partial(self._lookup, query, max_snippets)
        return await (observe_lookup(self._observers, run) if self._observers else run([0, 0]))

    async def _lookup(self, query: str, max_snippets: int | None, tally: list[int]) -> list[dict]:
        params = self.params
        timeout = params.tool_timeout_s
        if self._settle is not None:
            # the model asked and waits anyway: half the wait lets queued messages land first
            started = time.monotonic()
            await self._settle(timeout / 2)
            timeout -= time.monotonic() - started
        task = self._search(query, params.search_limit, None, timeout)
        await wait_for_task(task, max(timeout, 0.001))
        if not task.done():
            task.add_done_callback(consume)
            raise TimeoutError(f"recall_memory: no answer within {params.tool_timeout_s} s")
        task.result()  # the archive's failure is the tool's error, not an empty answer
        hits, replies = self._result(task)
        tally[0] = len(hits)
        cap, most = params.max_tokens, params.max_snippets
        if params.adaptive:  # the context and what recall adds share request_tokens
            cap, most = block_cap(params, self._context.tokens())
        limit = max_snippets or most
        snippets = select_hits(
            hits,
            query,
            View("", frozenset()),
            params,
            replies=replies,
            min_similarity=self.min_similarity,
        )
        terms = topic_terms(query)
        gathered = gather_words(hits, query, terms, params.min_score) if params.gather else []
        if gathered and snippets:  # the model waits anyway: the second search has time
            more = await self._gather(gathered, hits, max(timeout / 2, 0.001))
            tally[0] += len(more[0])
            if more[0]:
                snippets = with_gathered(
                    snippets, more, query, View("", frozenset()), gathered, params
                )
        out: list[dict] = []
        used = 0
        now, relative = self.now(), asks_when(query)
        for s in snippets[:limit]:
            item: dict[str, Any] = {
                "when": snippet_when(s, self.call_id, now=now, relative=relative),
                "speaker": speaker(s.role),
                "text": window(s.text, terms, params.max_snippet_tokens, self.count),
            }
            if s.reply:
                item["reply"] = {
                    "speaker": speaker(s.reply_role),
                    "text": window(s.reply, terms, params.max_snippet_tokens, self.count),
                }
            cost = self.count(json.dumps(item, ensure_ascii=False))
            if used + cost > cap and out:
                break
            used += cost
            out.append(item)
        tally[1] = len(out)
        return out

    async def close(self) -> None:
        """Cancel a search (and a semantic indexing) still running (the call is over)."""
        task, self._inflight = self._inflight, None
        if task is not None and not task.done():
            task.cancel()
        self.drop_leftovers()
        if self.semantic is not None:
            try:
                await self.semantic.close()
            except Exception as e:  # closing must never break End/Cancel
                logger.warning(f"closing recall failed ({type(e).__name__})")


__all__ = [
    "MIN_RECALL_TOKENS",
    "RecallArchive",
    "RecallObserver",
    "RecallOutcome",
    "RecallStep",
    "Snippet",
    "fits",
    "recall_budget",
    "search_wait",
    "search_words",
]
