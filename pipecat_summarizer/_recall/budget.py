"""The turn's budgets for recall, pure: how long it waits for the archive, how many tokens
its block may take.

The latency budget bounds the frame's time in the processor, not only the search: what ran
before the search and what ranking and rendering will take after it come out of it
(:func:`search_wait`, :func:`after_search`); an extra search starts only when it is expected
to answer in what is left (:class:`ExtraCost`). The block's tokens give way to the request
ceiling before it evicts conversation (:func:`recall_budget`, :func:`fits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: The least room worth a recalled block: the header (~25 tokens) and one short quote.
MIN_RECALL_TOKENS = 40

#: The margin a call's first turns keep back of the latency budget for the frame's time the
#: recall step cannot see or stop (at most a fifth of the budget; see :func:`planned_budget`).
#: 1 ms left the frame's p99 at 10.1-12.3 ms on a quiet machine (benchmarks/frame_bound.py);
#: 2 ms brings SQLite 1k-1M and PostgreSQL 1k-10k within 10 ms. From there each call learns
#: its own (:class:`Margin`).
MARGIN_S = 0.002
#: The learned margin's bounds: never under this (a fifth of the budget if that is less) ...
MARGIN_MIN_S = 0.001
#: ... nor over this, nor over :data:`MARGIN_MAX_SHARE` of the budget (a search always keeps
#: most of it).
MARGIN_MAX_S = 0.005
MARGIN_MAX_SHARE = 0.4
#: What one frame past the budget adds to the margin.
MARGIN_STEP_S = 0.0008
#: The share of frames the learned margin lets run past the budget: half the 1% a p99 allows.
OVER_SHARE = 0.005
#: The frame's time the processor cannot time: its queue hop before ``process_frame``
#: (p99 0.1-0.3 ms at PostgreSQL 100k, benchmarks/frame_bound.py).
OUTSIDE_STEP_S = 0.00025


def ran_over(budget_s: float, elapsed_s: float) -> bool:
    """Whether a frame pushed on ``elapsed_s`` after it reached the processor ran past
    ``budget_s``, counting the time before it that the processor cannot see
    (:data:`OUTSIDE_STEP_S`, at most a tenth of the budget)."""
    return elapsed_s > budget_s - min(OUTSIDE_STEP_S, budget_s / 10)


def planned_budget(budget_s: float, margin_s: float | None = None) -> float:
    """The part of the latency budget the recall step plans its work in: the budget less a
    margin for what the step cannot see or stop (the frame's queue hop and the processor's
    work before the step, placing the block and pushing the frame after it, the last hit
    judged past the deadline, a timer that fires late): ``margin_s`` (a call's learned
    :class:`Margin`) up to :data:`MARGIN_MAX_SHARE` of the budget, or by default a fifth of
    the budget, at most :data:`MARGIN_S`."""
    return max(0.0, budget_s - margin_of(budget_s, margin_s))


def margin_of(budget_s: float, margin_s: float | None) -> float:
    """The margin :func:`planned_budget` keeps back of ``budget_s``: ``margin_s`` up to
    :data:`MARGIN_MAX_SHARE` of it, or (``None``, not finite) the default."""
    if margin_s is None or not math.isfinite(margin_s):
        return max(0.0, min(budget_s / 5, MARGIN_S))
    return max(0.0, min(margin_s, budget_s * MARGIN_MAX_SHARE))


@dataclass(frozen=True)
class Margin:
    """The margin a call keeps back of its latency budget (see :func:`planned_budget`),
    learned from its frames: a frame that ran past the budget adds :data:`MARGIN_STEP_S`,
    each one within it takes back a small fraction of that, so the margin settles where
    :data:`OVER_SHARE` of the frames run past (the rule that tracks a quantile: at the
    settling point the steps up and down cancel out). The overrun it answers for is the
    frame's own work the deadline cannot cut, the loop waking late, a collection: on a
    PostgreSQL 100k archive, timed with the benchmark's instruments on, a fixed 2 ms left
    0.5-14% of a call's frames past 10 ms, a fixed 3.5 ms 0.5-1.5%, while a small archive needs
    less and gets its search more of the budget back (benchmarks/frame_bound.py).

    Parameters:
        seconds: The margin now; ``None`` for the first turns' default (a fifth of the
            budget, at most :data:`MARGIN_S`).
    """

    seconds: float | None = None

    def of(self, budget_s: float) -> float:
        """The margin kept back of ``budget_s`` now (as :func:`planned_budget` takes it;
        computed, not read back from the plan: at a budget of 1e15 s the plan's difference
        is rounding)."""
        return margin_of(budget_s, self.seconds)

    def after(self, budget_s: float, over: bool) -> Margin:
        """The margin after a frame of ``budget_s`` that ran past it (``over``) or not."""
        now = self.of(budget_s)
        if over:
            seconds = now + MARGIN_STEP_S
        else:
            seconds = now - MARGIN_STEP_S * OVER_SHARE / (1 - OVER_SHARE)
        low = min(MARGIN_MIN_S, budget_s / 5)
        high = min(MARGIN_MAX_S, budget_s * MARGIN_MAX_SHARE)
        return Margin(min(high, max(low, seconds)))


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


#: The latest durations an extra search's estimate keeps (see :class:`ExtraCost`).
EXTRA_SAMPLES = 3
#: The durations measured before the estimate may keep a search from starting: one slow
#: answer (the machine busy for a moment) never does.
EXTRA_MIN_SAMPLES = 2
#: Every this many turns in a row that did not start one, the next one is started anyway
#: and measured (an archive that got faster: its pages cached, a purge).
EXTRA_RETRY = 8
#: The same for the turn's ranking by meaning (see :class:`ExtraCost`'s ``every``): a sentence
#: model's query (MiniLM: 11.5-14.7 ms of CPU) never fits a 10 ms budget's share, and each
#: retry costs its turn that CPU beside the lexical search, so it is tried less often.
RANK_RETRY = 24


@dataclass(frozen=True)
class ExtraCost:
    """What one kind of extra search (the gathered words' second search, the stated values'
    searches for a later correction) took on the turns that started it, from its start to
    its answer (seconds): the turn starts one only when it is expected to answer within
    what is left of the budget (:meth:`fits`). One that could not answer in time ran for
    nobody: on SQLite on the store's thread, beside the turn's choice on the loop (the
    interpreter's lock); on PostgreSQL on a server backend, on the same CPUs. At SQLite 100k
    the three values' searches took 2.1 / 5.7 / 7.4 ms of the store's CPU (p10 / p50 / p90)
    and answered in time in none of 9 turns.

    The estimate is the lower median of the latest :data:`EXTRA_SAMPLES` (of two, the
    shorter), not a high percentile: a search that answers in time in most turns is
    started, so the corrections it finds still land where they fit; and it keeps none from
    starting before :data:`EXTRA_MIN_SAMPLES` were measured. A search let go counts, from
    the moment it is, the time it had run (a lower bound: the next turn may come before it
    ends), then its own once it ended (cancelled: the time it ran). Not started, no new
    duration comes: after :data:`EXTRA_RETRY` such turns in a row, one is started again,
    and its duration stands for all the samples (the archive as it is now: a fast retry
    after a slow start resumes the searches at once, a slow one waits the next retry).
    The turn's ranking by meaning is gated the same way, its retries ``every``
    :data:`RANK_RETRY` turns.

    Parameters:
        samples: The latest durations, oldest first (seconds).
        passed: The turns in a row that did not start one.
        retry: The one started is a retry (its duration replaces the samples).
        every: The turns in a row not started after which the next one is a retry.
    """

    samples: tuple[float, ...] = ()
    passed: int = 0
    retry: bool = False
    every: int = EXTRA_RETRY

    @property
    def expected(self) -> float | None:
        """How long the next one is expected to take (the samples' lower median), or
        ``None`` before any was measured."""
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[(len(ordered) - 1) // 2]

    def fits(self, left_s: float) -> bool:
        """Whether one may start with ``left_s`` left: expected to answer by then, too few
        durations measured yet to tell, or the turn to try again (see the class)."""
        expected = self.expected
        if expected is None or len(self.samples) < EXTRA_MIN_SAMPLES:
            return True
        return expected <= left_s or self.passed >= self.every

    def started(self) -> ExtraCost:
        """The estimate once a turn started one (its duration comes with :meth:`measured`)."""
        return replace(self, passed=0, retry=self.passed >= self.every)

    def skipped(self) -> ExtraCost:
        """The estimate once a turn did not start one."""
        return replace(self, passed=self.passed + 1, retry=False)

    def measured(self, seconds: float) -> ExtraCost:
        """The estimate with one more duration (never below 0); a retry's replaces them all."""
        took = max(0.0, seconds)
        if self.retry:
            return replace(self, samples=(took,) * EXTRA_MIN_SAMPLES, retry=False)
        return replace(self, samples=(*self.samples, took)[-EXTRA_SAMPLES:], retry=False)

    def revised(self, bound: float, seconds: float) -> ExtraCost:
        """The estimate with the duration ``bound`` (what a search let go had run by then,
        see :meth:`measured`) replaced by its own, ``seconds``, now that it ended (each copy of
        it: a retry's stands for all); as it is when ``bound`` is no longer among the samples."""
        if bound not in self.samples:
            return self
        # every copy: a retry's duration stands for all the samples
        took = max(bound, seconds)
        samples = tuple(took if x == bound else x for x in self.samples)
        return replace(self, samples=samples, retry=False)


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
    "EXTRA_MIN_SAMPLES",
    "EXTRA_RETRY",
    "EXTRA_SAMPLES",
    "ExtraCost",
    "MARGIN_MAX_S",
    "MARGIN_MAX_SHARE",
    "MARGIN_MIN_S",
    "MARGIN_S",
    "MARGIN_STEP_S",
    "Margin",
    "MIN_RECALL_TOKENS",
    "OUTSIDE_STEP_S",
    "OVER_SHARE",
    "RANK_RETRY",
    "Reserves",
    "after_search",
    "fits",
    "margin_of",
    "planned_budget",
    "ran_over",
    "recall_budget",
    "search_wait",
]
