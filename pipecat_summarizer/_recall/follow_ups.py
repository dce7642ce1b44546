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
from typing import Any

from pipecat_summarizer._recall.gather import clipped, unseen
from pipecat_summarizer._recall.query import asks_when, gathers
from pipecat_summarizer._recall.search import LATER_LIMIT, search_words
from pipecat_summarizer._recall.select import gather_words
from pipecat_summarizer._recall.superseded import stated_values


async def follow_ups(
    archive: Any,
    step: Any,
    query: str,
    terms: Sequence[str],
    sent: str,
    found: Sequence[Any],
) -> None:
    """Start the searches the turn's recall (``RecallStep``) makes after its search of
    ``sent`` answers with ``found``, derived as the turn derives them: the second search on
    the names and things of the first hits (a question that gathers), then the searches for
    the values the hits (and the second search's new ones) state, when the question asks
    about time or gathers. Each is a plain early search the turn takes by its exact words
    and scope; one the turn does not ask for ages out unused."""
    params = step.params
    scope = {"user_id": step.user_id} if step.user_id else {"call_id": step.call_id}
    hits = clipped((list(found), {}), sent.split())[0]  # as the turn's search returns them
    more: list[Any] = []
    gathered = gather_words(hits, query, terms, params.min_score) if params.gather else []
    words = search_words(" ".join(gathered)) if gathered else ""
    if words:
        limit = params.search_limit
        replies = params.max_snippets + 2
        archive.prefetch(
            words, limit=limit, any_word=True, replies=replies, follow_up=True, **scope
        )
        task = archive.running(words, limit=limit, any_word=True, **_scope(scope))
        if task is not None:
            try:
                second = await asyncio.shield(task)
            except Exception:  # noqa: BLE001 - the turn searches again itself
                second = []
            more = unseen(clipped((list(second), {}), words.split())[0], hits)
    if asks_when(query) or gathers(query):
        for value in stated_values([*hits, *more][: params.max_snippets]):
            archive.prefetch(value, limit=LATER_LIMIT, any_word=False, follow_up=True, **scope)


def _scope(scope: dict[str, Any]) -> dict[str, Any]:
    return {"user_id": scope.get("user_id"), "call_id": scope.get("call_id")}


__all__ = ["follow_ups"]
