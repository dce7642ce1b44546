"""The turn's budgets for recall, pure: how long it waits for the archive, how many tokens
its block may take.

The latency budget bounds the frame's time in the processor, not only the search: what ran
before the search and what ranking and rendering will take after it come out of it
(:func:`search_wait`, :func:`after_search`). The block's tokens give way to the request
ceiling before it evicts conversation (:func:`recall_budget`, :func:`fits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The least room worth a recalled block: the header (~25 tokens) and one short quote.
MIN_RECALL_TOKENS = 40

#: The most of the latency budget kept back for the frame's time the recall step cannot see
#: or stop (see :func:`planned_budget`). 1 ms left the frame's p99 at 10.1-12.3 ms on a quiet
#: machine (benchmarks/frame_bound.py); 2 ms brings SQLite 1k-1M and PostgreSQL 1k-10k within
#: 10 ms, and a search started on the caller's words (RecallPrefetch) does not pay for it.
MARGIN_S = 0.002


def planned_budget(budget_s: float) -> float:
    """The part of the latency budget the recall step plans its work in: the budget less a
    fifth of it, at most :data:`MARGIN_S`, for what the step cannot see or stop: the frame's
    queue hop and the processor's work before the step, placing the block and pushing the
    frame after it, the last hit judged past the deadline, a timer that fires late."""
    return max(0.0, budget_s - min(budget_s / 5, MARGIN_S))


def search_wait(budget_s: float, elapsed_s: float, after_s: float) -> float:
    """How long a turn waits for the archive: the latency budget less what the frame has
    spent already and what ranking and rendering the hits will take (``after_s``, at most
    half the budget: a search always gets some of it). Never negative."""
    reserve = min(max(0.0, after_s), budget_s / 2)
    return max(0.0, budget_s - max(0.0, elapsed_s) - reserve)


def after_search(previous_s: float, seconds: float) -> float:
    """The estimate of what ranking and rendering take after the search, given the last
    turn's ``seconds``: a moving average that rises at once and falls slowly (one slow turn
    is remembered)."""
    return seconds if seconds > previous_s else 0.8 * previous_s + 0.2 * seconds


@dataclass(frozen=True)
class Reserves:
    """What a turn keeps back of its budget for the work after the search, measured on the
    turns before it (seconds, each by :func:`after_search`).

    Parameters:
        wait: The work after the search that the deadline cannot cut (reading the context,
            the view, marking, rendering, placing): kept out of the search's wait. The
            selection's own time is not in it: the selection stops at the deadline, so a
            search answering late still leaves its first strong matches.
        extra: All the work after the search: kept out of the extra searches' waits
            (gathered words, corrected values), which take only what the selection leaves.
        select: The work after the selection: kept out of the selection's time.
    """

    wait: float = 0.0
    extra: float = 0.0
    select: float = 0.0

    def measured(
        self, found: float, picking: float, chosen: float, end: float, *, cap_s: float = math.inf
    ) -> Reserves:
        """The reserves after a turn whose search answered (or its wait ended) at
        ``found``, whose selection ran from ``picking`` to ``chosen``, and which ended at
        ``end`` (one clock). Each sample counts at most ``cap_s`` (the budget): a reserve
        never keeps back more than half the budget anyway, and a sample past it (a clock
        that jumped, a paused machine) would otherwise be remembered for dozens of turns."""

        def sample(seconds: float) -> float:
            return min(seconds, cap_s)

        return Reserves(
            wait=after_search(self.wait, sample((picking - found) + (end - chosen))),
            extra=after_search(self.extra, sample(end - found)),
            select=after_search(self.select, sample(end - chosen)),
        )


def recall_budget(max_tokens: int, room: int | None) -> int | None:
    """The recalled block's budget: ``max_tokens``, cut to the ``room`` the request ceiling
    leaves (``None``: no ceiling); ``None`` when less than :data:`MIN_RECALL_TOKENS` is left,
    so recall gives way (shrinks, then disappears) before the ceiling evicts conversation."""
    budget = max_tokens if room is None else min(max_tokens, room)
    return budget if budget >= MIN_RECALL_TOKENS else None


def fits(room: int | None) -> bool:
    """Whether a recalled block has room at all (see :func:`recall_budget`)."""
    return room is None or room >= MIN_RECALL_TOKENS


__all__ = [
    "MARGIN_S",
    "MIN_RECALL_TOKENS",
    "Reserves",
    "after_search",
    "fits",
    "planned_budget",
    "recall_budget",
    "search_wait",
]
