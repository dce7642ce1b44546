"""One early search (``RecallPrefetch``'s): its task, when it started, the caller's forget
count then, whether it is a follow-up; and the rule by which it may still answer a turn.

:class:`~pipecat_summarizer._recall.prefetch.PrefetchingArchive` keeps these by their words
and scope; a turn that asks for exactly those takes one (see its ``take``). The search's
task also reads the replies of its first hits (:func:`with_replies`), as the turn's search
would, so the turn reads nothing more for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from pipecat_summarizer._recall.gather import read_ahead


class EarlySearch:
    """A search started before the turn asked for it.

    Args:
        task: The search (and its replies' read, see :func:`with_replies`).
        started: When it started, on the loop's clock (a simulated-time loop's modelled
            time ages it, as a real one's time does).
        generation: The archive's forget count for the caller when it started.
        follow_up: One of a turn's follow-up searches (a second search, a value's), not
            the search of the caller's words.
    """

    __slots__ = ("task", "started", "generation", "follow_up")

    def __init__(self, task: asyncio.Task, started: float, generation: int, follow_up: bool):
        """Keep what the search is."""
        self.task = task
        self.started = started
        self.generation = generation
        self.follow_up = follow_up

    def stale(self, now: float, generation: int, max_age_s: float) -> bool:
        """Whether no turn may use it any more: older than ``max_age_s`` at ``now``, or the
        caller was forgotten since it started (``generation``: the count now)."""
        return now - self.started > max_age_s or self.generation != generation

    def usable(self, now: float, generation: int, max_age_s: float) -> bool:
        """Whether it may answer a turn: not :meth:`stale`, and still running or answered
        (not cancelled, not failed)."""
        if self.stale(now, generation, max_age_s):
            return False
        task = self.task
        return not task.done() or (not task.cancelled() and task.exception() is None)


async def with_replies(archive: Any, search: Awaitable[Sequence[Any]], n: int) -> Sequence[Any]:
    """``search``'s hits, once the replies of the first ``n`` were read ahead (see
    :func:`~pipecat_summarizer._recall.gather.read_ahead`; a failed read leaves them to the
    turn)."""
    found = await search
    if n > 0 and found:
        try:
            await read_ahead(archive, list(found)[:n])
        except Exception:  # noqa: BLE001 - the turn reads them itself then
            pass
    return found


__all__ = ["EarlySearch", "with_replies"]
