"""The recall step's public contracts: the archive it searches, its observers, early searches.

:class:`RecallArchive` is what recall needs of an archive (a ``MemoryStore`` is one).

An observer (:class:`RecallObserver`, registered with ``RecallStep.add_observer``) is told
when the step starts an archive search and, once a turn's recall (``prepare``) or a
``recall_memory`` lookup (``lookup``) is over, how it went (:class:`RecallOutcome`: counts,
durations and an outcome word, never conversation text). Tracing is one such observer.

An early search source (:class:`EarlySearches`, handed to ``RecallStep.use_early_searches``)
answers a search the step is about to send when it started the very same search earlier
(``RecallPrefetch`` starts it on the caller's transcribed words); the step's archive stays
the store.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from loguru import logger

#: The outcomes of a turn's recall (``kind="turn"``).
TURN_OUTCOMES = (
    "skipped",
    "recalled",
    "late",
    "error",
    "missed_budget",
    "watch_late",
    "nothing_new",
)
#: The outcomes of a ``recall_memory`` lookup (``kind="tool"``).
TOOL_OUTCOMES = ("found", "nothing", "timeout", "error")
#: The step's counters an outcome is read from.
COUNTERS = ("turns", "recalled", "missed", "late_served", "errors", "watch_late")


@runtime_checkable
class RecallArchive(Protocol):
    """What recall needs of an archive: the store's ``search`` (``MemoryStore`` has it).

    ``search`` returns hits best first, each with ``call_id``, ``position``, ``turn``, ``at``,
    ``role`` and ``content`` (a :class:`~pipecat_summarizer.store.SearchHit`). An archive
    that also has ``message(call_id, position)`` (``MemoryStore`` does) lets a recalled
    question bring its answer along.
    """

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> Sequence[Any]:
        """Full-text search of archived messages, best first."""
        ...


@dataclass(frozen=True)
class RecallOutcome:
    """How one recall went (numbers and words from a fixed set only: no conversation text).

    Attributes:
        kind: ``"turn"`` (a user turn's recall) or ``"tool"`` (the ``recall_memory`` tool).
        outcome: For a turn one of :data:`TURN_OUTCOMES`: ``skipped`` (nothing to search
            for, or no room for a block), ``recalled``, ``late`` (a previous turn's late
            answer placed), ``error``, ``missed_budget``, ``watch_late`` (hits found, but
            the turn's forget watch, the caller's tombstone read, had not answered by the
            frame's deadline: nothing placed, as a forget may be unseen), ``nothing_new``
            (searched, nothing placed). For the tool one of :data:`TOOL_OUTCOMES`.
        started_ns: When it started (wall clock, ``time.time_ns()``).
        ended_ns: When it ended (same clock).
        hits: The archive's hits the recall had to choose from (the first search's, and the
            second search's new ones).
        snippets: The snippets placed in the block (turn) or returned (tool).
        tokens: The placed block's tokens (the step's counter), ``None`` when nothing was
            placed or for the tool.
        over_budget: The turn took longer than ``RecallParams.latency_budget_s`` counted
            from the frame's arrival (turn), or the lookup timed out (tool).
        error: The exception's type name (``"timeout"`` for a lookup's timeout), if any.
    """

    kind: Literal["turn", "tool"]
    outcome: str
    started_ns: int
    ended_ns: int
    hits: int = 0
    snippets: int = 0
    tokens: int | None = None
    over_budget: bool = False
    error: str | None = None

    @property
    def duration_s(self) -> float:
        """How long it took (seconds)."""
        return (self.ended_ns - self.started_ns) / 1e9


class RecallObserver:
    """Told about a recall step's searches and recalls; subclass and override what you need.

    Both methods run on the event loop, inside the turn: keep them cheap, and plain
    functions (``async def`` ones are refused by ``add_observer``: the turn cannot await
    them). An exception in either (``CancelledError`` too) is logged (its type only) and
    never costs the call. Each observer is told its own copy of an outcome.
    """

    def on_search_started(self, query: str) -> None:
        """The step sent ``query`` (the words searched, conversation text) to the archive:
        a turn's search, a second (gathering) search, or a lookup's."""

    def on_recall(self, outcome: RecallOutcome) -> None:
        """A turn's recall or a lookup is over (also when it raised)."""


@runtime_checkable
class EarlySearches(Protocol):
    """A source of searches started before the step asks for them (``RecallPrefetch``'s).

    A source may also offer the turn's work after the search done early: ``take_block()``
    (an :class:`~pipecat_summarizer._recall.compose.EarlyBlock` or ``None``, taken),
    ``served_block(block)`` (the turn used its follow-up answers) and ``turn_passed()`` (the
    turn found no block it could use: it chooses and renders itself, so early work still
    under way would only take the loop from it); the step looks them up by name and uses a
    block only when its inputs equal the turn's own."""

    def take(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> Awaitable[Sequence[Any]] | None:
        """The answer of an early search of exactly these words and scope (taken: it answers
        once), or ``None`` when there is none usable (the step then asks the archive)."""
        ...


class RecallHooks:
    """The public hooks of a recall step (``RecallStep`` is one): its observers, and the
    source of early searches handed over to it."""

    def __init__(self) -> None:
        """No observer, no early searches."""
        self._observers: list[RecallObserver] = []
        self._early: EarlySearches | None = None

    def add_observer(self, observer: RecallObserver) -> None:
        """Tell ``observer`` about this step's searches and recalls (see
        :class:`~pipecat_summarizer._recall.hooks.RecallObserver`); once, however often it
        is added.

        Raises:
            TypeError: If ``observer`` is not a ``RecallObserver``, or one of its methods is
                ``async def`` (the turn cannot wait for it).
        """
        if not isinstance(observer, RecallObserver):
            raise TypeError(f"observer must be a RecallObserver, got {type(observer).__name__}")
        for method in ("on_search_started", "on_recall"):
            if inspect.iscoroutinefunction(getattr(observer, method, None)):
                raise TypeError(
                    f"{type(observer).__name__}.{method} must be a plain function, not async def: "
                    "recall runs inside the turn and cannot await it (start a task from it "
                    "if you need to)"
                )
        # by identity: two observers that compare equal (dataclasses) are two observers
        if not any(o is observer for o in self._observers):
            self._observers.append(observer)

    def remove_observer(self, observer: RecallObserver) -> None:
        """Stop telling ``observer`` (this very object; no error if it was not added)."""
        self._observers[:] = [o for o in self._observers if o is not observer]

    @property
    def early_searches(self) -> EarlySearches | None:
        """The source of early searches handed over to this step, if any."""
        return self._early

    def use_early_searches(self, early: EarlySearches | None) -> None:
        """Let ``early`` answer the step's archive searches it started before (same words and
        scope); any other search goes to the archive. ``None`` stops it."""
        if early is not None and not isinstance(early, EarlySearches):
            raise TypeError(f"early must have take(), got {type(early).__name__}")
        self._early = early


def turn_outcome(delta: Mapping[str, int], placed: bool) -> str:
    """A turn's outcome from how the step's counters (:data:`COUNTERS`) moved during it and
    whether a block was placed (pure)."""
    if delta["turns"] == 0:
        return "skipped"  # no question to search for, or no room for a block
    if placed and delta["recalled"]:
        return "late" if delta["late_served"] else "recalled"
    if delta["errors"]:
        return "error"
    if delta["missed"]:
        return "missed_budget"
    if delta["watch_late"]:
        return "watch_late"
    return "nothing_new"


async def observe_turn(
    step: Any,
    observers: Sequence[RecallObserver],
    run: Callable[[list[int]], Awaitable[Any]],
    over_budget: Callable[[], bool],
) -> Any:
    """Run a turn's recall (``run(tally)``, which fills ``tally`` with the hits chosen from
    and the snippets placed) and tell ``observers`` how it went: the outcome from the
    step's counters (:func:`turn_outcome`), the placed block's tokens (``step.count`` of
    ``step.message``), whether ``over_budget()`` once it is over."""
    start_ns, tally = time.time_ns(), [0, 0]
    before = {k: int(getattr(step, k)) for k in COUNTERS}
    try:
        placed = await run(tally)
    except BaseException as e:
        _told(observers, "turn", "error", start_ns, tally, over_budget(), type(e).__name__)
        raise
    delta = {k: int(getattr(step, k)) - before[k] for k in COUNTERS}
    message = step.message if placed is not None else None
    tokens = None
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        tokens = step.count(message["content"])
    outcome = turn_outcome(delta, placed is not None)
    _told(observers, "turn", outcome, start_ns, tally, over_budget(), tokens=tokens)
    return placed


async def observe_lookup(
    observers: Sequence[RecallObserver], run: Callable[[list[int]], Awaitable[list[dict]]]
) -> list[dict]:
    """Run a ``recall_memory`` lookup (``run(tally)``, see :func:`observe_turn`) and tell
    ``observers`` how it went: ``found``, ``nothing``, ``timeout`` (over budget) or
    ``error``."""
    start_ns, tally = time.time_ns(), [0, 0]
    try:
        found = await run(tally)
    except TimeoutError:
        _told(observers, "tool", "timeout", start_ns, tally, True, "timeout")
        raise
    except BaseException as e:
        _told(observers, "tool", "error", start_ns, tally, False, type(e).__name__)
        raise
    _told(observers, "tool", "found" if found else "nothing", start_ns, tally, False)
    return found


def _told(
    observers: Sequence[RecallObserver],
    kind: Literal["turn", "tool"],
    outcome: str,
    start_ns: int,
    tally: Sequence[int],
    over_budget: bool,
    error: str | None = None,
    *,
    tokens: int | None = None,
) -> None:
    end_ns = time.time_ns()
    hits, snippets = tally
    told = RecallOutcome(
        kind, outcome, start_ns, end_ns, hits, snippets, tokens, over_budget, error
    )
    notify(observers, "on_recall", told)


def notify(observers: Sequence[RecallObserver], method: str, *args: Any) -> None:
    """Call ``method`` on each observer; a failing observer is logged (its type and the
    exception's type) and the others are still told.

    Each is told its own copy of an outcome (one that forces a change cannot change what
    the next is told), and the observers as they were when this began (one that removes
    itself never makes the next one missed)."""
    for observer in tuple(observers):
        told = tuple(copy.copy(a) if isinstance(a, RecallOutcome) else a for a in args)
        try:
            result = getattr(observer, method)(*told)
        # CancelledError too: raised by a plain function it is the observer's own (a
        # cancelled task's result read), never this task's cancellation, which only an await
        # delivers; left to rise it ended the turn's recall and hung the pipeline
        except (Exception, asyncio.CancelledError) as e:  # an observer never costs the call
            logger.warning(
                f"recall observer {type(observer).__name__}.{method} failed ({type(e).__name__})"
            )
            continue
        if inspect.isawaitable(result):
            _unawaited(observer, method, result)


_said_unawaited: set[tuple[type, str]] = set()


def _unawaited(observer: RecallObserver, method: str, result: Any) -> None:
    # a plain function that returned a coroutine (add_observer refuses async def ones): it is
    # closed, so it never warns "never awaited" far from here, and said once per class
    close = getattr(result, "close", None)
    if callable(close):
        close()
    key = (type(observer), method)
    if key not in _said_unawaited:
        _said_unawaited.add(key)
        logger.warning(
            f"recall observer {type(observer).__name__}.{method} returned an awaitable; "
            "observers must be synchronous: it was not run"
        )


__all__ = [
    "RecallArchive",
    "RecallHooks",
    "COUNTERS",
    "TOOL_OUTCOMES",
    "TURN_OUTCOMES",
    "EarlySearches",
    "RecallObserver",
    "RecallOutcome",
    "notify",
    "observe_lookup",
    "observe_turn",
    "turn_outcome",
]
