"""When a compaction starts and what it summarizes: the session's scheduling state.

:class:`CompactionSchedule` holds what decides *when* (the trigger, a compaction waiting for
the response's end, a manual summary queued behind the one in flight, the one-warning-per-
cause memory); :func:`choose_plan` and :func:`request_for` decide *what* (the plan, the
secondary LLM's request). Both are synchronous; the context itself is written only by
:class:`~pipecat_summarizer._session.owner.ContextSession`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer._compaction.cadence import AnswerWait, kept_messages
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.plan import Plan, blocked_reason, select
from pipecat_summarizer._compaction.prompt import SummaryRequest, build_request
from pipecat_summarizer._compaction.trigger import CompactionTrigger, validate_summary_config
from pipecat_summarizer._record.summary_text import SummaryDraft
from pipecat_summarizer._text.tokens import CachedCounter, count_text
from pipecat_summarizer.events import (
    ContextCompactedEvent,
    Reason,
    SummaryFailedEvent,
    short_sha256,
)
from pipecat_summarizer.params import ContextSummarizerParams
from pipecat_summarizer.summarizers.base import Summarizer
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer


@dataclass
class Job:
    """A summary to run: the plan in flight and the request the secondary LLM gets."""

    plan: Plan
    request: SummaryRequest
    reason: Reason
    config: LLMContextSummaryConfig
    summarizer: Summarizer
    started: float


def choose_plan(
    logical: list,
    *,
    reason: Reason,
    config: LLMContextSummaryConfig,
    params: ContextSummarizerParams,
    trigger: CompactionTrigger,
    counter: CachedCounter,
    summary_message: dict | None,
    previous_tokens: int,
    reducible_tokens: Callable[[], int],
    answer_pending: bool,
    name: str,
) -> tuple[Plan | None, str | None]:
    """What a compaction of ``logical`` (the view with the pending queue in place) covers.

    Returns:
        The plan and ``None``, or ``None`` and why none can start (for the one warning per
        cause).
    """
    # a request's plan precedes its answer, which lands before the summary: it is kept
    keep = kept_messages(config.min_messages_after_summary, answer_pending=answer_pending)
    plan = select(
        logical,
        keep=keep,
        counter=counter,
        summary_message=summary_message,
        previous_summary_tokens=previous_tokens,
        input_budget=params.max_summary_input_tokens,
        protect_injected_system=params.protect_injected_system,
        stale_after=params.unresolved_tool_call_turns,
    )
    if plan is None:
        blocked = blocked_reason(
            logical,
            keep=keep,
            summary_message=summary_message,
            protect_injected_system=params.protect_injected_system,
            stale_after=params.unresolved_tool_call_turns,
        )
        return None, blocked
    gain = plan.input_tokens - previous_tokens
    if not trigger.worth_it(reason, gain, reducible_tokens):
        logger.debug(f"{name}: token threshold tripped, but only {gain} tokens to gain")
        return None, "too little to summarize outside the kept recent messages"
    return plan, None


def request_for(
    plan: Plan,
    *,
    config: LLMContextSummaryConfig,
    previous: str | None,
    input_budget: int | None,
    trigger: CompactionTrigger,
    interrupted: Collection[int] = frozenset(),
    notices: Collection[int] = frozenset(),
) -> SummaryRequest:
    """The secondary LLM's request for ``plan`` (shortened messages share the budget;
    ``interrupted``: ``id()`` of answers a barge-in cut off, ``notices``: of a resume's
    notice, each marked in the transcript)."""
    shorten_to = 2000
    if plan.shortened and input_budget:
        shorten_to = max(200, input_budget * 4 // (2 * len(plan.shortened)))
    return build_request(
        plan.summarized,
        previous_summary=previous,
        max_tokens=trigger.output_budget(config),
        prompt=config.summarization_prompt,
        shortened=plan.shortened,
        shorten_to_chars=shorten_to,
        interrupted=interrupted,
        notices=notices,
    )


def compacted_event(
    job: Job,
    draft: SummaryDraft,
    before: Measurement,
    after: Measurement,
    *,
    kept: int,
    now: float,
    counter: CachedCounter,
    compaction: int,
    pending: int,
    facts: int,
) -> ContextCompactedEvent:
    """The event of a summary spliced in (``before``/``after``: the context's measurements)."""
    return ContextCompactedEvent(
        reason=job.reason,
        messages_before=before.message_count,
        messages_after=after.message_count,
        messages_summarized=len(job.plan.summarized),
        messages_kept=kept,
        tokens_before=before.total_tokens,
        tokens_after=after.total_tokens,
        summary_tokens=counter.count_message(draft.message),
        input_tokens=job.plan.input_tokens + count_text(counter, job.request.system_prompt),
        latency_s=now - job.started,
        summary_sha256=short_sha256(draft.text),
        compaction=compaction,
        pending_messages=pending,
        pinned_facts=facts,
    )


class CompactionSchedule:
    """When compactions start: the trigger, the wait for a response's end, the manual queue.

    Args:
        config: Pipecat's auto-summarization config.
        params: The processor's params (trigger and retry groups).
        name: How log lines name the processor.
    """

    def __init__(
        self, config: LLMAutoContextSummarizationConfig, params: ContextSummarizerParams, name: str
    ):
        """Initialize the schedule."""
        self._config = config
        self.trigger = CompactionTrigger(config, params.trigger, params.retry)
        # a compaction due on a request waits for the response's end (the companion reports
        # it): then the answer's shape is known, a tool round's call and result included
        self.answer_wait = AnswerWait()
        self.waiting: Measurement | None = None  # the request's measurement, while waiting
        self.waiting_after = 0  # compactions applied when the wait began
        # End/Cancel passed: the companion may still report the last response or a
        # follow-up, which must not start a compaction on a call that is over
        self.ended = False
        self.manual_waiting = False
        self.manual_pending: LLMContextSummaryConfig | None = None
        self.blocked: str | None = None  # why the last due compaction could not start
        self._warned: set[str] = set()
        self._name = name

    def request(
        self,
        m: Measurement,
        *,
        now: float,
        in_flight: bool,
        pending: bool,
        tools: Callable[[], bool],
        compactions: int,
    ) -> Reason | None:
        """The reason a compaction starts now for this request, if one does (a due one may
        wait for the response's end instead). ``tools`` says whether the request offers the
        LLM tools; asked only when a compaction is due."""
        reason = self.trigger.due(
            m, now=now, in_flight=in_flight, pending=pending, answer_pending=True
        )
        wait = self.answer_wait
        self.waiting_after = compactions
        if reason is None:  # as wait.request(None): nothing waits, nothing starts
            wait.reason, wait.answered, wait.tools = None, False, False
            self.waiting = None
            return None
        reason = wait.request(reason, tools_offered=tools())
        self.waiting = m if wait.reason is not None else None
        return reason

    def response_ended(self, *, in_flight: bool, compactions: int) -> tuple[Reason, Any] | None:
        """The waited-on response ended: the reason and measurement to start with, unless
        it called tools, a summary runs, or a (manual) summary landed meanwhile."""
        reason, m = self.answer_wait.ended(), self.waiting
        self.waiting = None
        if reason is None or m is None or in_flight or compactions != self.waiting_after:
            return None
        return reason, m

    def end(self) -> None:
        """The call is over: a compaction waiting for a response's end never starts."""
        self.ended = True
        self.answer_wait.reason = None
        self.waiting = None

    def queue_manual(self, override: LLMContextSummaryConfig | None) -> None:
        """A manual summary waits for the one in flight."""
        self.manual_pending, self.manual_waiting = override, True

    def take_manual(self) -> tuple[bool, LLMContextSummaryConfig | None]:
        """Whether a manual summary was queued, and its override (the queue empties)."""
        queued, override = self.manual_waiting, self.manual_pending
        self.manual_pending, self.manual_waiting = None, False
        return queued, override

    def warn_blocked(self, reason: Reason, pending: int) -> None:
        """One WARNING per cause (until a summary lands) when a due compaction cannot start."""
        cause = self.blocked
        if cause is None or cause in self._warned:
            return
        self._warned.add(cause)
        logger.warning(
            f"{self._name}: compaction is due ({reason}) but cannot start: {cause}; "
            f"{pending} messages pending, the context grows until this changes"
        )

    def manual_config(
        self, override: LLMContextSummaryConfig | None, default: Summarizer
    ) -> tuple[LLMContextSummaryConfig, Summarizer]:
        """The config and summarizer of a manual summary: the override's, fully honoured,
        or (none, or rejected: a frame is no place to crash the pipeline) the processor's."""
        if override is not None:
            try:
                validate_summary_config(override, "LLMSummarizeContextFrame.config")
            except (TypeError, ValueError) as e:
                logger.warning(f"{self._name}: manual summary config rejected ({e}); using default")
                override = None
        if override is None:
            return self._config.summary_config, default
        return override, PipecatLLMSummarizer(override.llm) if override.llm else default

    def failed(self, reason: Reason, error: str, now: float) -> SummaryFailedEvent:
        """A summary failed (the context is left untouched): backoff, logs, the event."""
        delay, escalate = self.trigger.summary_failed(now)
        n = self.trigger.failures.consecutive
        logger.warning(
            f"{self._name}: summary failed ({error}); context left untouched, "
            f"failure {n} in a row, next automatic attempt in {delay:.1f}s"
        )
        if escalate:
            logger.error(
                f"{self._name}: context summarization has failed {n} time{'' if n == 1 else 's'} "
                "in a row; the context keeps growing until the summarizer recovers"
            )
        return SummaryFailedEvent(error, n, reason, delay)

    def context_replaced(self) -> None:
        """A new conversation: planned afresh, its causes warned about afresh."""
        self.trigger.context_replaced()
        self._warned.clear()

    def applied(self) -> None:
        """A summary landed: a blocked cause may be warned about again."""
        self._warned.clear()
