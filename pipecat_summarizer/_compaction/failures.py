"""Failures: the summary's backoff and single ERROR per streak, and the per-frame steps'.

:class:`FailureTracker` counts a summarizer's failures in a row (exponential backoff, one ERROR
when they reach ``error_after``); :func:`chain_backlog` lets only a success start the next
backlog round; :class:`StepFailures` counts the processor's own per-frame work failing (the
same step failing frames in a row disables summarization for the call). Pure: time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipecat_summarizer._validation import validate_numeric_fields


@dataclass
class FailureTracker:
    """Consecutive failures, escalation, and exponential backoff.

    Args:
        backoff_s: Delay after the first failure; doubled per further failure.
        max_backoff_s: Cap on the delay.
        error_after: Failures in a row that produce the single ERROR.
    """

    backoff_s: float = 5.0
    max_backoff_s: float = 120.0
    error_after: int = 3
    consecutive: int = 0
    retry_at: float = 0.0
    escalated: bool = False

    def __post_init__(self):
        """Validate the numbers: a NaN backoff would never allow a retry."""
        validate_numeric_fields(self)
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff must not be negative")
        if self.error_after < 1:
            raise ValueError("error_after must be at least 1")

    def ready(self, now: float) -> bool:
        """True when an automatic attempt is allowed at ``now``."""
        return now >= self.retry_at

    def failed(self, now: float) -> tuple[float, bool]:
        """Record a failure at ``now``.

        Returns:
            The delay before the next attempt, and whether this failure must be logged as
            the (one) ERROR.
        """
        self.consecutive += 1
        # A float exponent capped well below overflow: 2 ** 1024 as an int times a float
        # raised OverflowError after 1,025 failures in a row.
        exponent = min(self.consecutive - 1, 64)
        delay = min(self.max_backoff_s, self.backoff_s * math.ldexp(1.0, exponent))
        self.retry_at = now + delay
        escalate = self.consecutive >= self.error_after and not self.escalated
        self.escalated = self.escalated or escalate
        return delay, escalate

    def succeeded(self) -> None:
        """Record a success: the count, the backoff and the escalation reset."""
        self.consecutive = 0
        self.retry_at = 0.0
        self.escalated = False


def chain_backlog(*, pending: bool, last_failed: bool, ready: bool) -> bool:
    """Whether a finished summary task may start the next backlog round itself.

    Only after a success: a failed attempt waits for the next user turn (and its backoff),
    so a fast-failing summarizer with ``retry_backoff_s=0`` is not retried back to back.

    Args:
        pending: Evicted messages wait for a summary.
        last_failed: The attempt that just ended failed.
        ready: The backoff allows an automatic attempt now.

    Returns:
        True to start the backlog round now.
    """
    return pending and ready and not last_failed


@dataclass
class StepFailures:
    """Failures of the processor's own per-frame work (counting, planning, eviction...).

    Each failure is reported; the same step failing ``limit`` frames in a row disables
    summarization for the call (reported once), since retrying it every turn only repeats
    the error. A frame whose work completes resets the streak.

    Args:
        limit: Failures of one step in a row that disable summarization.
    """

    limit: int = 3
    step: str | None = None
    streak: int = 0
    disabled: bool = False

    def failed(self, step: str) -> bool:
        """Record a failure of ``step``.

        Returns:
            True exactly once: when this failure disables summarization.
        """
        self.streak = self.streak + 1 if step == self.step else 1
        self.step = step
        if self.streak >= self.limit and not self.disabled:
            self.disabled = True
            return True
        return False

    def succeeded(self) -> None:
        """A frame's work completed: the streak resets."""
        self.step, self.streak = None, 0


__all__ = ["FailureTracker", "StepFailures", "chain_backlog"]
