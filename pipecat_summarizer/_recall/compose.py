"""The turn's work after the search: the hits chosen, the block's size, its text; and the same
work done early, kept for the turn that asks for exactly what it was done on.

:func:`choose` and :func:`render` are what ``RecallStep`` runs on the hits once the archive
answered (pure: the same inputs, the same block). When ``RecallPrefetch``'s early search and
its follow-ups answer before the caller's turn ends, the prefetch runs them then, on the
context as it is with the caller's words as its last message, and keeps the result as an
:class:`EarlyBlock` with what it depended on: the query, its terms, the hits and their replies
(:func:`searched`: the follow-up searches' answers follow from them), the context's messages,
the summary and pinned facts (:func:`viewed`), the block's token budget for the text. The turn
takes the follow-ups' answers only when its own search's inputs are equal, and the choice and
text only when the context's are too, so it is the block the turn would have made with time
enough; anything changed meanwhile (other words, a summary spliced in, a fact pinned, a
forget, less room) and the turn chooses (or renders) as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer._recall.gather import Found, mark_later, with_gathered
from pipecat_summarizer._recall.query import ContextTerms, asks_when, query_parts
from pipecat_summarizer._recall.render import render_recall, snippet_when
from pipecat_summarizer._recall.select import (
    Snippet,
    block_budget,
    block_cap,
    context_view,
    lists,
    select_hits,
    still_relevant,
)
from pipecat_summarizer.params import RecallParams

#: How long an early block may serve a turn, from when it was made (seconds; as an early
#: search's answer, ``prefetch.MAX_AGE_S``).
MAX_AGE_S = 5.0

#: The filling's weak hits per strong match when a long context leaves the block less than
#: ``ROOMY`` of ``max_tokens``, in a question that asks for one thing (a list's pieces are
#: often among them: a list question's filling is not cut); but never fewer than
#: ``LEAST_WEAK`` when at most ``FEW_STRONG`` hits matched strongly: a question about one
#: thing with a strong match or two often has its answer among the next weak hits, while
#: many strong matches hold it among them. On LoCoMo at question time (conversations 26-44,
#: each question's hits and context replayed through the choice and the rendering, the
#: labels said once per call, render.SAME_CALL): 84.55% answer recall at 15.09% of the full
#: buffer's input without the floor; with it 84.96% at 15.32% (the floor for any number of
#: strong matches: 85.00% at 15.49%; a floor of 12: 84.84% at 15.37%; for at most 2 strong
#: matches: 84.67% at 15.21%).
WEAK_PER_STRONG = 1.0
LEAST_WEAK = 16
FEW_STRONG = 4
ROOMY = 0.75

#: An early search's key: its words, scope (``user_id``, ``call_id``), limit, ``any_word``.
SearchKey = tuple[str, str | None, str | None, int, bool]


def searched(query: str, terms: Sequence[str], found: Found) -> tuple:
    """What the follow-up searches and the choice depend on of the search: the query, its
    terms, the hits and their replies (compared by value). With semantic recall the hits are
    the fused ones, each with its similarity, and the replies include the index's: equal
    only when the ranking by meaning saw the same index with the same query."""
    return (query, tuple(terms), found[0], found[1])


def viewed(context: ContextTerms, texts: Sequence[str]) -> tuple:
    """What the choice depends on of the context: its messages as read (see
    ``ContextTerms.fingerprint``) and the summary and pinned facts' texts."""
    return (context.fingerprint(), tuple(texts))


def choose(
    found: Found,
    query: str,
    terms: Sequence[str],
    context: ContextTerms,
    texts: Sequence[str],
    params: RecallParams,
    *,
    how: str = "on_time",
    gathered: Sequence[str] = (),
    more: Found = ([], {}),
    later: Sequence[Any] = (),
    min_similarity: float | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Snippet], int]:
    """The snippets worth recalling this turn and the block's size (tokens, before the
    request ceiling's room): the hits judged against what the model sees (``context``
    brought up to the turn's messages, and ``texts``, the summary and pinned facts), the
    second search's hits after them, corrections marked. ``deadline`` (``clock``'s time):
    the hits are judged best first until then (see ``select_hits``); ``None``: all are.

    A question that asks for a list (``select.lists``) gets the largest block whatever the
    context (``block_cap``, ``block_budget``); in a long context a question about one thing
    gets less filling (:func:`_filling`). Together, on LoCoMo at question time
    (conversations 30 and 26, 1 s budget): 85.5% -> 86.5% answer recall (multi-hop
    74.8% -> 79.2%) at 20.2% -> 20.3% of the full buffer's input; across calls unchanged."""
    hits, replies = found
    view = context_view(context, texts)
    most: int | None = None
    cap = params.max_tokens
    listing = False
    if params.adaptive:
        # the cap follows the context: a new call's empty context leaves the most room
        listing = lists(query)
        cap, most = block_cap(params, context.tokens(), listing=listing)
    snippets = select_hits(
        hits,
        query,
        view,
        params,
        replies=replies,
        terms=terms,
        rare=context.rare(query, terms),
        min_similarity=min_similarity,
        parts=query_parts(query, terms),
        most=None if more[0] or how == "late" else most,
        weak_per_strong=_filling(query, listing, cap, params),
        least_weak=LEAST_WEAK,
        few_strong=FEW_STRONG,
        deadline=deadline,
        clock=clock,
    )
    if more[0]:
        snippets = with_gathered(
            snippets, more, query, view, gathered, params, deadline=deadline, clock=clock
        )
    if how == "late":
        snippets = still_relevant(snippets, query, params.min_score)
    snippets = mark_later(snippets, later)
    size = params.max_tokens
    if most is not None:
        snippets = snippets[:most]
        size = block_budget(snippets, params.min_tokens, cap, listing=listing)
    return snippets, size


def _filling(query: str, listing: bool, cap: int, params: RecallParams) -> float | None:
    """The filling's weak hits per strong match (``None``: as many as fit): a long context,
    that leaves the block less than :data:`ROOMY` of ``max_tokens``, keeps
    :data:`WEAK_PER_STRONG` (at least :data:`LEAST_WEAK` after a few strong matches) for a
    question about one thing; a list's pieces and the message a question about time means
    are often among the weak hits, so theirs is not cut."""
    if listing or asks_when(query) or cap >= ROOMY * params.max_tokens:
        return None
    return WEAK_PER_STRONG


def render(
    snippets: Sequence[Snippet],
    query: str,
    params: RecallParams,
    *,
    budget: int,
    call_id: str | None,
    count: Callable[[str], int],
    texts: Sequence[str],
    now: float,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """The recalled message's text for ``snippets`` within ``budget`` tokens (see
    ``render_recall``), or ``None`` when nothing fits."""
    return render_recall(
        snippets,
        query=query,
        call_id=call_id,
        max_tokens=budget,
        max_snippet_tokens=params.max_snippet_tokens,
        count=count,
        in_view=texts,
        now=now,
        deadline=deadline,
        clock=clock,
    )


@dataclass(frozen=True)
class EarlyBlock:
    """The work after the search, done before the turn ended (see the module's docstring).

    Parameters:
        searched: What it was done on of the search (:func:`searched`).
        gathered: The words of the second search (a question that gathers).
        more: The second search's new hits and their replies.
        later: The hits of the stated values' searches (corrections).
        follow_ups: The follow-up searches started early (their keys).
        viewed: The context it was chosen against (:func:`viewed`).
        snippets: The snippets chosen.
        size: The block's size before the room (see :func:`choose`).
        budget: The token budget ``text`` was rendered for.
        labels: Its snippets' labels by the clock then, for a question about time (see
            :func:`labels`): the text serves a turn whose labels are the same.
        text: The block's text (``None``: nothing fitted).
        user_id: The caller (``None``: this call only).
        generation: The archive's forget count for the caller before its follow-ups.
        made: When its follow-ups started (the loop's clock): each of their answers is
            younger.
    """

    searched: tuple
    gathered: list[str]
    more: Found
    later: list[Any]
    follow_ups: tuple[SearchKey, ...]
    viewed: tuple
    snippets: list[Snippet]
    size: int
    budget: int
    labels: tuple
    text: str | None
    user_id: str | None
    generation: int
    made: float

    def fresh(self, now: float) -> bool:
        """Young enough to serve a turn (see :data:`MAX_AGE_S`)."""
        return 0.0 <= now - self.made <= MAX_AGE_S


def labels(snippets: Sequence[Snippet], query: str, call_id: str | None, now: float) -> tuple:
    """What the block's text depends on of the clock: for a question about time, each
    snippet's label ("three weeks ago, on ...") at ``now``; nothing otherwise."""
    if not asks_when(query):
        return ()
    return tuple(snippet_when(s, call_id, now=now, relative=True) for s in snippets)


__all__ = [
    "MAX_AGE_S",
    "EarlyBlock",
    "SearchKey",
    "choose",
    "render",
    "labels",
    "searched",
    "viewed",
]
