"""The searches a turn's recall makes after its first one, started early.

Once ``RecallPrefetch``'s early search of the caller's words answers, :func:`follow_ups`
starts what ``RecallStep`` will search next with those hits: the second search on the names
and things of the first strong hits (a question that gathers, see
:func:`~pipecat_summarizer._recall.select.gather_words`) and the searches for the values the
hits state (a correction made in a later call, see
:func:`~pipecat_summarizer._recall.superseded.stated_values`). Each is derived exactly as the
turn derives it and started as a plain early search (``PrefetchingArchive.prefetch``), so the
turn takes it by its exact words and scope; one the turn does not ask for ages out unused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipecat_summarizer._recall.budget import recall_budget
from pipecat_summarizer._recall.compose import (
    EarlyBlock,
    SearchKey,
    choose,
    labels,
    render,
    searched,
    viewed,
)
from pipecat_summarizer._recall.gather import Found, as_found, clipped, unseen
from pipecat_summarizer._recall.query import ContextTerms, asks_when, focus, gathers, recall_query
from pipecat_summarizer._recall.search import LATER_LIMIT, loop_time, search_words
from pipecat_summarizer._recall.select import gather_words
from pipecat_summarizer._recall.superseded import stated_values

if TYPE_CHECKING:
    from pipecat_summarizer._recall.step import RecallStep

#: What a turn finds with its follow-up searches: the words gathered, the second search's new
#: hits and their replies, the hits of the stated values' searches.
Followed = tuple[list[str], Found, list[Any], tuple[SearchKey, ...]]


async def turn_found(
    archive: Any, step: Any, query: str, words: str, found: Sequence[Any]
) -> Found:
    """The early search's answer ``found`` (of ``words``) as the turn's search hands it on
    (``ArchiveSearch._search_with_replies``): its hits and the replies of the first ones,
    each text clipped around the words; with semantic recall, fused with the ranking by
    meaning of ``query`` first (``SemanticIndex.rank_soon``: off the loop unless the query
    was embedded already), the replies the index holds taken from it: the turn's own
    steps (both read the answer with :func:`~pipecat_summarizer._recall.gather.as_found`,
    whose pure part is :func:`~pipecat_summarizer._recall.gather.fused`). The turn's own
    fused hits (their similarities) and replies are then equal to these only if its
    ranking saw the same index: the early block's equality rule covers the semantic
    inputs too."""
    index = step.semantic
    ranked = None if index is None else await index.rank_soon(query)
    first = step.params.max_snippets + 2
    return await as_found(archive, found, words, first, ranked=ranked, index=index)


async def follow_ups(
    archive: Any,
    step: Any,
    query: str,
    terms: Sequence[str],
    hits: Sequence[Any],
) -> Followed | None:
    """Start the searches the turn's recall (``RecallStep``) makes after its search answers
    with ``hits`` (as the turn reads them, see :func:`turn_found`), derived as the turn
    derives them: the second search on
    the names and things of the first hits (a question that gathers), then the searches for
    the values the hits (and the second search's new ones) state, when the question asks
    about time or gathers. Each is a plain early search the turn takes by its exact words
    and scope; one the turn does not ask for ages out unused.

    Returns:
        What the turn will find with them, once they answered, as the turn reads it
        (``(gathered, more, later, searches)``: the words gathered, the second search's new
        hits and their replies, the hits of the values' searches, and each search's key),
        or ``None`` when one of them failed or is not there to wait for (the turn searches
        again itself).
    """
    params = step.params
    scope = {"user_id": step.user_id} if step.user_id else {"call_id": step.call_id}
    hits = list(hits)
    more: Found = ([], {})
    gathered = gather_words(hits, query, terms, params.min_score) if params.gather else []
    words = search_words(" ".join(gathered)) if gathered else ""
    ok = True
    started: list[SearchKey] = []
    user, call = scope.get("user_id"), scope.get("call_id")
    if words:
        limit = params.search_limit
        replies = params.max_snippets + 2
        archive.prefetch(
            words, limit=limit, any_word=True, replies=replies, follow_up=True, **scope
        )
        task = archive.running(words, limit=limit, any_word=True, **_scope(scope))
        ok = task is not None
        started.append((words, user, call, limit, True))
        if task is not None:
            try:
                second = await asyncio.shield(task)
                found2, replies2 = await as_found(archive, second, words, replies)
                more = (unseen(found2, hits), replies2)
            except Exception:  # noqa: BLE001 - the turn searches again itself
                ok = False
    if not (asks_when(query) or gathers(query)):
        return (gathered, more, [], tuple(started)) if ok else None
    values = stated_values([*hits, *more[0]][: params.max_snippets])
    waits = []
    for value in values:
        archive.prefetch(value, limit=LATER_LIMIT, any_word=False, follow_up=True, **scope)
        waits.append(archive.running(value, limit=LATER_LIMIT, any_word=False, **_scope(scope)))
        started.append((value, user, call, LATER_LIMIT, False))
    if not ok or any(w is None for w in waits):
        return None
    try:
        answers = [await asyncio.shield(w) for w in waits]
    except Exception:  # noqa: BLE001 - the turn searches again itself
        return None
    later = clipped(([h for a in answers for h in a], {}), values)[0]
    return gathered, more, later, tuple(started)


async def early_work(
    archive: Any,
    step: Any,
    summarizer: Any,
    view: ContextTerms,
    query: str,
    terms: Sequence[str],
    words: str,
    said: str,
    found: Sequence[Any],
) -> None:
    """``RecallPrefetch``'s early search of ``words`` answered with ``found``: read as the
    turn reads it (:func:`turn_found`: with semantic recall, fused with the ranking by
    meaning), its follow-up searches (:func:`follow_ups`), then, once they answered, the
    turn's work after them (the snippets chosen and the block's text, see
    :mod:`~pipecat_summarizer._recall.compose`) on the summarizer's context as the turn will
    read it (``said`` as its last message, last turn's recalled block taken out; ``view``:
    the prefetch's reading of it, kept from turn to turn), kept in ``archive`` (the
    ``PrefetchingArchive``) for the turn whose own inputs are exactly these."""
    user_id = step.user_id
    generation = archive.generation(user_id)
    made = loop_time()  # before the follow-ups start: each answer is younger
    hits = await turn_found(archive, step, query, words, found)
    followed = await follow_ups(archive, step, query, terms, hits[0])
    texts_in_view = getattr(getattr(summarizer, "record", None), "texts_in_view", None)
    if followed is None or not callable(texts_in_view):
        return
    gathered, more, later, searches = followed
    params = step.params
    # the context as the turn reads it: last turn's recalled block taken out first
    messages = summarizer.context.get_messages()
    kept = step.without_message(messages)
    view.update([*(messages if kept is None else kept), {"role": "user", "content": said}])
    texts = list(texts_in_view())
    snippets, size = choose(
        hits,
        query,
        terms,
        view,
        texts,
        params,
        gathered=gathered,
        more=more,
        later=later,
        min_similarity=step.min_similarity,
    )
    budget = recall_budget(size, None)
    if budget is None or archive.generation(user_id) != generation:
        return  # no block, or the caller was forgotten meanwhile: nothing is kept
    now = step.now()
    text = render(
        snippets,
        query,
        params,
        budget=budget,
        call_id=step.call_id,
        count=step.count,
        texts=texts,
        now=now,
    )
    block = EarlyBlock(
        searched=searched(query, terms, hits),
        gathered=gathered,
        more=more,
        later=later,
        follow_ups=searches,
        viewed=viewed(view, texts),
        snippets=snippets,
        size=size,
        budget=budget,
        labels=labels(snippets, query, step.call_id, now),
        text=text,
        user_id=user_id,
        generation=generation,
        made=made,
    )
    archive.keep_block(block)


def turn_query(
    step: RecallStep, messages: Sequence[Any], said: str, terms: ContextTerms
) -> str | None:
    """The query the turn's recall will ask if the caller's turn is ``said`` and the context
    is otherwise ``messages``: what ``RecallStep.prepare`` computes, on the context as it
    will be (``None``: that turn will not search). ``terms`` is this companion's own
    :class:`ContextTerms`, kept from turn to turn as the step keeps its."""
    kept = step.without_message(messages)  # last turn's block goes before the turn's recall
    current = [*(messages if kept is None else kept), {"role": "user", "content": said}]
    terms.update(current)
    return recall_query(current, step.params.max_question_words, terms.names())


def turn_search(
    step: RecallStep, messages: Sequence[Any], said: str, terms: ContextTerms
) -> str | None:
    """The words the turn's recall will send to the archive (see :func:`turn_query`)."""
    query = turn_query(step, messages, said, terms)
    if query is None:
        return None
    return search_words(query, focus(query, terms.common())) or None


def _scope(scope: dict[str, Any]) -> dict[str, Any]:
    return {"user_id": scope.get("user_id"), "call_id": scope.get("call_id")}


__all__ = [
    "Followed",
    "early_work",
    "follow_ups",
    "turn_found",
    "turn_query",
    "turn_search",
]
