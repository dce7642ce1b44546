"""When to compact: thresholds, the no-re-trigger rules, and backoff after failures.

Pure values with a little state; time is passed in, so tests need no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.utils.context.llm_context_summarization import LLMAutoContextSummarizationConfig

from pipecat_summarizer.events import Reason
from pipecat_summarizer.tokens import Measurement


def validate_config(config: LLMAutoContextSummarizationConfig) -> None:
    """Reject configurations that would summarize on every turn.

    Args:
        config: Pipecat's auto-summarization config.

    Raises:
        ValueError: If the kept tail alone would trip the message threshold, or if the
            template has no ``{summary}`` placeholder.
    """
    summary = config.summary_config
    keep = summary.min_messages_after_summary
    limit = config.max_unsummarized_messages
    if limit is not None and keep >= limit:
        raise ValueError(
            f"min_messages_after_summary ({keep}) must be smaller than "
            f"max_unsummarized_messages ({limit}): the kept messages alone would trigger "
            "a new summary on every turn"
        )
    if "{summary}" not in summary.summary_message_template:
        raise ValueError("summary_message_template must contain the {summary} placeholder")
    if summary.summarization_timeout is not None and summary.summarization_timeout <= 0:
        raise ValueError("summarization_timeout must be positive")


def trigger_reason(
    config: LLMAutoContextSummarizationConfig, m: Measurement, soft: float = 1.0
) -> Reason | None:
    """Which threshold, if any, the measurement trips.

    The token threshold compares only what summarization can reduce (the system prompt
    and other protected messages are excluded), and the message threshold counts messages
    since the last summary, so neither can fire again right after a compaction.

    Args:
        config: Pipecat's auto-summarization config.
        m: The context measurement.
        soft: Share of the token threshold at which to start (pre-emptive compaction);
            the message threshold keeps Pipecat's exact meaning.

    Returns:
        ``"tokens"``, ``"messages"``, or ``None``.
    """
    tokens = config.max_context_tokens
    if tokens is not None and m.reducible_tokens >= tokens * soft:
        return "tokens"
    limit = config.max_unsummarized_messages
    if limit is not None and m.messages_since_summary >= limit:
        return "messages"
    return None


def summary_budget(config: LLMAutoContextSummarizationConfig) -> int:
    """The summary's output budget: ``target_context_tokens``, capped at a quarter of
    ``max_context_tokens`` so a summary alone can never refill the context it relieves
    (Pipecat's defaults, 6,000 of 8,000, would re-trigger compaction every few turns).

    Args:
        config: Pipecat's auto-summarization config.

    Returns:
        The budget in tokens.
    """
    target = config.summary_config.target_context_tokens
    if config.max_context_tokens is None:
        return target
    return max(100, min(target, config.max_context_tokens // 4))


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
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (self.consecutive - 1))
        self.retry_at = now + delay
        escalate = self.consecutive >= self.error_after and not self.escalated
        self.escalated = self.escalated or escalate
        return delay, escalate

    def succeeded(self) -> None:
        """Record a success: the count, the backoff and the escalation reset."""
        self.consecutive = 0
        self.retry_at = 0.0
        self.escalated = False
