"""When to compact: thresholds, the no-re-trigger rules, and backoff after failures.

:class:`CompactionTrigger` is the one place that decides whether a summary starts: Pipecat's
thresholds (with the soft ratio), messages since the summary, manual-only mode, the backoff
after failures, the wait for enough to gain, the "nothing to plan at this content" memo and
the summary's output budget cap. Pure values with a little state; time is passed in, so tests
need no clock. The failure counts it keeps are :mod:`pipecat_summarizer._compaction.failures`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from loguru import logger
from pipecat.utils.context import llm_context_summarization as _pipecat_summarization
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer._compaction.cadence import CacheCadence, kept_messages, over_context_limit
from pipecat_summarizer._compaction.failures import FailureTracker, chain_backlog
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._validation import validate_numeric_fields
from pipecat_summarizer.events import Reason
from pipecat_summarizer.params import RetryParams, TriggerParams
from pipecat_summarizer.summarizers.pipecat_llm import check_inference

# Pipecat's fallback when summarization_timeout is None (120 s in 1.14).
DEFAULT_SUMMARIZATION_TIMEOUT: float = _pipecat_summarization.DEFAULT_SUMMARIZATION_TIMEOUT


def validate_config(config: LLMAutoContextSummarizationConfig) -> None:
    """Reject configurations that are malformed, or whose kept tail alone reaches the
    message threshold (``min_messages_after_summary >= max_unsummarized_messages``).

    Thresholds that leave room for one exchange only (limit 6, keep 4) compact on every user
    turn; Pipecat's built-in accepts them, so they are accepted here too, and
    :class:`CompactionTrigger` logs one WARNING at construction (:func:`every_turn_warning`).

    Every numeric field (``max_context_tokens``, ``max_unsummarized_messages`` and the
    summary config's) must be a finite number of its type; ``summarization_timeout=None``
    means Pipecat's fallback (:data:`DEFAULT_SUMMARIZATION_TIMEOUT`).

    Args:
        config: Pipecat's auto-summarization config.

    Raises:
        TypeError: If ``summary_config`` is not an ``LLMContextSummaryConfig``, or a numeric
            field holds a string, a bool or another non-number (the field is named).
        ValueError: If a numeric field is NaN or infinite or out of range, if the kept tail
            alone would trip the message threshold, or if the template has no
            ``{summary}`` placeholder.
    """
    # the config's own fields first: Pipecat's __post_init__ has already set the summary's
    # target to 80% of max_context_tokens when it was larger, so a bad max_context_tokens
    # (True, 1) shows up as a bad summary_config.target_context_tokens (0)
    validate_numeric_fields(config)
    if config.max_context_tokens is None and config.max_unsummarized_messages is None:
        raise ValueError("max_context_tokens or max_unsummarized_messages must be set")
    if config.max_context_tokens is not None and config.max_context_tokens <= 0:
        raise ValueError("max_context_tokens must be positive (or None)")
    if config.max_unsummarized_messages is not None and config.max_unsummarized_messages < 1:
        raise ValueError("max_unsummarized_messages must be at least 1 (or None)")
    summary = getattr(config, "summary_config", None)
    tokens = config.max_context_tokens
    if isinstance(summary, LLMContextSummaryConfig) and tokens == 1:
        raise ValueError(
            "max_context_tokens must be at least 2: Pipecat sets "
            "summary_config.target_context_tokens to 80% of it, which would be 0"
        )
    validate_summary_config(summary)
    keep = config.summary_config.min_messages_after_summary
    limit = config.max_unsummarized_messages
    if limit is not None and keep >= limit:
        raise ValueError(
            f"min_messages_after_summary ({keep}) must be smaller than "
            f"max_unsummarized_messages ({limit}): the kept messages alone would trigger "
            "a new summary on every turn"
        )


def turns_per_compaction(config: LLMAutoContextSummarizationConfig) -> int | None:
    """Turns from one message-threshold compaction to the next, in a plain conversation.

    A plain conversation: each turn adds one user message and one answer (no tools), and each
    summary lands before the next turn. After a compaction the summary is followed by the
    kept tail (``min_messages_after_summary``, the answer among them; 1 more when it is 0 or
    1: the user message and its answer stay together); the request whose answer brings the
    count to ``max_unsummarized_messages`` starts the next one (:func:`trigger_reason`).
    With Pipecat's defaults (20, keep 4): every 8 turns. Tool rounds add messages, so a
    call with tools compacts at most this far apart.

    Args:
        config: Pipecat's auto-summarization config.

    Returns:
        The number of turns (at least 1), or ``None`` when the message threshold is off.
    """
    limit = config.max_unsummarized_messages
    if limit is None:
        return None
    keep = config.summary_config.min_messages_after_summary
    tail = keep if keep >= 2 else keep + 1
    return max(1, -(-(limit - tail) // 2))


def every_turn_warning(
    config: LLMAutoContextSummarizationConfig, trigger: TriggerParams
) -> str | None:
    """The warning for thresholds that would compact on every user turn, or ``None``.

    Pipecat's built-in accepts such a configuration (and compacts as often), so it is
    accepted here too, with this one warning at construction. Not in manual-only mode (the
    thresholds start nothing) nor with a ``cached_input_discount`` (message-threshold
    compactions then wait until they pay).

    Args:
        config: Pipecat's auto-summarization config.
        trigger: The trigger parameters.

    Returns:
        One line naming the fields and how often it will compact, without conversation text.
    """
    if not trigger.auto or trigger.cached_input_discount > 0:
        return None
    if turns_per_compaction(config) != 1:
        return None
    limit = config.max_unsummarized_messages
    keep = config.summary_config.min_messages_after_summary
    tail = keep if keep >= 2 else keep + 1
    return (
        f"max_unsummarized_messages ({limit}) leaves room for only one exchange after the "
        f"kept tail (summary_config.min_messages_after_summary={keep}): the message "
        "threshold will start a compaction on every user turn, as Pipecat's built-in "
        f"would; use max_unsummarized_messages >= {tail + 3} for one every 2 turns or more"
    )


def validate_summary_config(summary: object, name: str = "summary_config") -> None:
    """Check one summary config (the processor's, or a manual override's).

    Args:
        summary: The config.
        name: How to name it in messages.

    Raises:
        TypeError: If it is not an ``LLMContextSummaryConfig``, a field has the wrong type,
            or its ``llm`` does not implement ``run_inference``.
        ValueError: If a numeric field is NaN, infinite or out of range, or the template
            lacks ``{summary}``.
    """
    if not isinstance(summary, LLMContextSummaryConfig):
        raise TypeError(f"{name} must be an LLMContextSummaryConfig, got {type(summary).__name__}")
    validate_numeric_fields(summary, f"{name}.", optional=("summarization_timeout",))
    if summary.target_context_tokens <= 0:
        raise ValueError(f"{name}.target_context_tokens must be positive")
    if summary.min_messages_after_summary < 0:
        raise ValueError(f"{name}.min_messages_after_summary must not be negative")
    template = summary.summary_message_template
    if not isinstance(template, str) or "{summary}" not in template:
        raise ValueError(
            f"{name}.summary_message_template must contain the {{summary}} placeholder"
        )
    prompt = summary.summarization_prompt
    if prompt is not None and not isinstance(prompt, str):
        raise TypeError(f"{name}.summarization_prompt must be a string or None")
    if summary.llm is not None:
        check_inference(summary.llm, f"{name}.llm")
    if summary.summarization_timeout is not None and summary.summarization_timeout <= 0:
        raise ValueError(f"{name}.summarization_timeout must be positive (or None)")


def effective_timeout(summary: LLMContextSummaryConfig) -> float:
    """The summarization timeout in seconds: ``None`` means Pipecat's fallback, as in
    Pipecat (``DEFAULT_SUMMARIZATION_TIMEOUT``, 120 s), never "wait forever"."""
    timeout = summary.summarization_timeout
    return DEFAULT_SUMMARIZATION_TIMEOUT if timeout is None else float(timeout)


def trigger_reason(
    config: LLMAutoContextSummarizationConfig,
    m: Measurement,
    soft: float = 1.0,
    *,
    answer_pending: bool = False,
) -> Reason | None:
    """Which threshold, if any, the measurement trips.

    The token threshold compares only what summarization can reduce (the system prompt
    and other protected messages are excluded), and the message threshold counts messages
    since the last summary, so neither can fire again right after a compaction. Pipecat's
    own threshold on the whole context applies too, unless the protected messages take more
    than half of it (``cadence.over_context_limit``): a compaction
    never starts later than Pipecat's.

    On a request (``answer_pending``) the message threshold counts the answer on its way,
    as the kept tail does (:func:`~pipecat_summarizer._compaction.cadence.kept_messages`): the
    compaction starts on the first request whose answer brings the count to the threshold,
    and that request carries at most ``max_unsummarized_messages`` since the summary.
    Counted without it, a tail of exactly ``min_messages_after_summary`` (4) plus whole
    turns reaches an even threshold (20) only at 21: a turn later in every cycle than
    Pipecat's built-in in a live call, whose summary keeps 4 plus the answer.

    Args:
        config: Pipecat's auto-summarization config.
        m: The context measurement.
        soft: Share of the token threshold at which to start (pre-emptive compaction);
            the message threshold is not scaled.
        answer_pending: ``m`` measures a request the main LLM is about to answer.

    Returns:
        ``"tokens"``, ``"messages"``, or ``None``.
    """
    tokens = config.max_context_tokens
    if tokens is not None:
        # in the provider's tokens once its usage calibrated the estimate (scale 1.0: as is)
        scale = m.scale
        reducible, total = m.reducible_tokens * scale, m.total_tokens * scale
        if reducible >= tokens * soft:
            return "tokens"
        # over_context_limit needs the whole context at the threshold: checked first, cheaply
        if total >= tokens and over_context_limit(total, reducible, tokens):
            return "tokens"
    limit = config.max_unsummarized_messages
    if limit is None:
        return None
    since = m.messages_since_summary
    if since + (1 if answer_pending else 0) < limit:
        return None
    # and something beyond the kept tail to summarize (a tail of 0 or 1 keeps the request's
    # own messages: the answer alone must not trip a plan that would be empty)
    keep = kept_messages(
        config.summary_config.min_messages_after_summary, answer_pending=answer_pending
    )
    return "messages" if since > keep else None


def summary_budget(config: LLMAutoContextSummarizationConfig) -> int:
    """The summary's output budget: ``target_context_tokens``, capped at a quarter of
    ``max_context_tokens`` so a summary alone can never refill the context it relieves
    (Pipecat's defaults, 6,000 of 8,000, would re-trigger compaction every few turns).

    A target below the cap is sent as given; the cap is never exceeded (it is at least
    one token, for a ``max_context_tokens`` below 4).

    Args:
        config: Pipecat's auto-summarization config.

    Returns:
        The budget in tokens.
    """
    target = config.summary_config.target_context_tokens
    if config.max_context_tokens is None:
        return target
    return min(target, max(1, config.max_context_tokens // 4))


class CompactionTrigger:
    """Every gate that decides when an automatic compaction starts, with its state.

    The processor asks :meth:`due` on each request it prepares (user turns, and tool
    follow-ups through its companion after the LLM), plans when it answers a reason, and
    reports back: :meth:`nothing_to_plan` (the plan was empty), :meth:`worth_it` (the token
    plan's gain), :meth:`summary_failed`, :meth:`summary_applied`, :meth:`context_replaced`.
    Manual requests do not ask: they only wait for the summary in flight.

    Args:
        config: Pipecat's auto-summarization config (thresholds and summary config).
        trigger: Manual-only mode, the soft ratio and the minimum gain.
        retry: The backoff after failures.
    """

    def __init__(
        self,
        config: LLMAutoContextSummarizationConfig,
        trigger: TriggerParams | None = None,
        retry: RetryParams | None = None,
    ):
        """Initialize the gates (nothing remembered yet)."""
        self.config = config
        self.params = trigger or TriggerParams()
        warning = every_turn_warning(config, self.params)
        if warning is not None:
            logger.warning(warning)  # once, at construction: accepted, as Pipecat accepts it
        retry = retry or RetryParams()
        self.failures = FailureTracker(
            backoff_s=retry.backoff_s,
            max_backoff_s=retry.max_backoff_s,
            error_after=retry.error_after_failures,
        )
        # a token plan that gained too little: wait until the reducible tokens reach this
        self.replan_at_tokens = 0
        # the message count at which the last plan found nothing: nothing new to plan yet
        self.no_plan_at: int | None = None
        # the provider's tokens per estimated token at the last request (calibration)
        self.scale = 1.0
        # with a prompt cache, message-threshold compactions wait until they pay
        self.cadence = CacheCadence(self.params.cached_input_discount)

    def due(
        self,
        m: Measurement,
        *,
        now: float,
        in_flight: bool,
        pending: bool,
        answer_pending: bool = False,
    ) -> Reason | None:
        """The reason to start an automatic compaction now, or ``None``.

        Args:
            m: The context measurement of this turn.
            now: The loop's clock (for the backoff).
            in_flight: A summary is running (one at a time).
            pending: Evicted messages wait for a summary (the backlog, due even in
                manual-only mode: only a summary brings them back).
            answer_pending: ``m`` measures a request: its answer counts toward the message
                threshold (:func:`trigger_reason`).
        """
        cadence = self.cadence
        self.scale = scale = m.scale  # the provider's tokens per estimated one (calibration)
        cadence.observe(int(m.reducible_tokens * scale))  # every turn's request is billed
        if in_flight or now < self.failures.retry_at:  # not failures.ready(now)
            return None
        reason = None
        params = self.params
        if params.auto:
            reason = trigger_reason(
                self.config, m, params.soft_ratio, answer_pending=answer_pending
            )
        if reason is not None and cadence.defer(reason):
            reason = None  # carrying the messages costs less than rewriting the cached prefix
        if reason == "tokens" and m.reducible_tokens * scale < self.replan_at_tokens:
            reason = None  # the last token plan gained too little; wait until it would
        if reason is None and pending:
            reason = "backlog"
        if reason is None or self.no_plan_at == m.message_count:
            return None  # nothing selectable has been added since the last empty plan
        return reason

    def nothing_to_plan(self, m: Measurement) -> None:
        """The plan at this content was empty (or not worth it): skip until it grows."""
        self.no_plan_at = m.message_count

    def worth_it(self, reason: Reason, gain: int, reducible_tokens: Callable[[], int]) -> bool:
        """Whether a planned compaction gains enough to start.

        A token-triggered plan must summarize at least ``min_token_gain`` of
        ``max_context_tokens`` (net of the previous summary it replaces); otherwise the next
        attempt waits until the reducible tokens have grown by the shortfall.

        Args:
            reason: What triggered it (only ``"tokens"`` is gated).
            gain: Tokens the plan summarizes, minus the previous summary's.
            reducible_tokens: The context's reducible tokens now (read only when too small).
        """
        tokens = self.config.max_context_tokens
        if reason != "tokens" or not tokens:
            return True
        needed = self.params.min_token_gain * tokens
        scale = self.scale  # gain and the context in the provider's tokens, as the threshold
        if gain * scale >= needed:
            return True
        self.replan_at_tokens = int(reducible_tokens() * scale) + int(needed - gain * scale)
        return False

    def output_budget(self, summary: LLMContextSummaryConfig) -> int:
        """The summary's output budget: the processor's own config is capped (see
        :func:`summary_budget`); a manual override's is honoured as given."""
        if summary is self.config.summary_config:
            return summary_budget(self.config)
        return summary.target_context_tokens

    def ready(self, now: float) -> bool:
        """The backoff allows an automatic attempt at ``now``."""
        return self.failures.ready(now)

    def summary_failed(self, now: float) -> tuple[float, bool]:
        """Record a failure; see :meth:`FailureTracker.failed`."""
        return self.failures.failed(now)

    def summary_applied(self) -> None:
        """A summary landed: the backoff, the gain wait and the memo reset."""
        self.failures.succeeded()
        self.no_plan_at = None
        self.replan_at_tokens = 0
        self.cadence.compacted()

    def context_replaced(self) -> None:
        """The application replaced the context: plan it afresh."""
        self.no_plan_at = None

    def chain_backlog(self, *, pending: bool, now: float) -> bool:
        """Whether a finished summary task starts the next backlog round itself (only after
        a success, when the backoff allows it; see :func:`chain_backlog`)."""
        return chain_backlog(
            pending=pending,
            last_failed=self.failures.consecutive > 0,
            ready=self.failures.ready(now),
        )
