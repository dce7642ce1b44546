"""``ContextSummarizer``: the Pipecat shell around the pure planning core.

It decides when (``policy``), asks what (``plan``), runs one background summary at a time,
and applies the result with a synchronous, identity-checked splice of the shared context.
Frames are never held: every frame is pushed on unchanged, except the manual
``LLMSummarizeContextFrame``, which this processor consumes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    LLMContextFrame,
    LLMSummarizeContextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer.events import (
    ContextSummaryAppliedFrame,
    Reason,
    SummaryAppliedEvent,
    SummaryFailedEvent,
    short_sha256,
)
from pipecat_summarizer.plan import Plan, make_protection, select, splice
from pipecat_summarizer.policy import FailureTracker, trigger_reason, validate_config
from pipecat_summarizer.prompt import SummaryRequest, build_request
from pipecat_summarizer.summarizers.base import Summarizer, clean_summary
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer
from pipecat_summarizer.tokens import ContextMeter, EstimateTokenCounter, TokenCounter, count_text


@dataclass
class SummarizerOptions:
    """Options beyond Pipecat's config, each with a safe default.

    Parameters:
        max_summary_input_tokens: Budget for what one summary request sends (previous
            summary and transcript). Whole units are taken oldest first; the rest waits for
            the next round. ``None`` for unbounded.
        token_counter: Per-message token counter; defaults to the Pipecat-compatible
            estimate. Pass ``TokenizerCounter(encoding)`` for exact counts.
        protect_injected_system: Keep system/developer messages injected mid-call verbatim
            instead of summarizing them.
        min_token_gain: A token-triggered compaction starts only if it would summarize at
            least this share of ``max_context_tokens``, so a context whose recent turns alone
            are large is not re-summarized every turn.
        retry_backoff_s: Wait after a failed summary before trying again automatically;
            doubled for each further failure in a row.
        max_retry_backoff_s: Cap on that wait.
        error_after_failures: Failures in a row that produce one ERROR log.
        summary_role: Role of the injected summary message (Pipecat uses ``"user"``).
    """

    max_summary_input_tokens: int | None = 8000
    token_counter: TokenCounter | None = None
    protect_injected_system: bool = True
    min_token_gain: float = 0.1
    retry_backoff_s: float = 5.0
    max_retry_backoff_s: float = 120.0
    error_after_failures: int = 3
    summary_role: str = "user"

    def __post_init__(self):
        """Validate the options."""
        if self.max_summary_input_tokens is not None and self.max_summary_input_tokens < 100:
            raise ValueError("max_summary_input_tokens must be at least 100 (or None)")
        if not 0 <= self.min_token_gain < 1:
            raise ValueError("min_token_gain must be in [0, 1)")
        if self.retry_backoff_s < 0 or self.max_retry_backoff_s < 0:
            raise ValueError("retry backoff must not be negative")
        if self.error_after_failures < 1:
            raise ValueError("error_after_failures must be at least 1")
        if self.summary_role not in ("user", "assistant", "system", "developer"):
            raise ValueError("summary_role must be user, assistant, system or developer")


def _as_auto_config(config: Any) -> LLMAutoContextSummarizationConfig:
    if config is None:
        return LLMAutoContextSummarizationConfig()
    if isinstance(config, LLMAutoContextSummarizationConfig):
        return config
    if hasattr(config, "to_auto_config"):  # the deprecated LLMContextSummarizationConfig
        return config.to_auto_config()
    raise TypeError(
        f"config must be an LLMAutoContextSummarizationConfig, got {type(config).__name__}"
    )


def _as_summarizer(summarizer: Any) -> Summarizer:
    if isinstance(summarizer, LLMService):
        return PipecatLLMSummarizer(summarizer)
    if not callable(getattr(summarizer, "summarize", None)):
        raise TypeError(
            "summarizer must have an async summarize(request) method or be an LLMService"
        )
    return summarizer


def _render(template: str, summary: str) -> str:
    try:
        return template.format(summary=summary)
    except (KeyError, IndexError, ValueError):
        return template.replace("{summary}", summary)


@dataclass
class _Job:
    plan: Plan
    request: SummaryRequest
    reason: Reason
    config: LLMContextSummaryConfig
    summarizer: Summarizer
    started: float


class ContextSummarizer(FrameProcessor):
    """Summarizes older turns of the shared context in the background.

    Place it between the user aggregator and the main LLM. On each user-turn
    ``LLMContextFrame`` it checks Pipecat's thresholds; when one trips it starts one
    background summary of the oldest turns on a secondary LLM, and when the summary is back
    it splices it into the shared context (only if the summarized messages are still in
    place), keeping recent turns and anything added meanwhile verbatim.

    Event handlers:
        on_summary_applied(processor, SummaryAppliedEvent)
        on_summary_failed(processor, SummaryFailedEvent)

    Example::

        summarizer = ContextSummarizer(
            context=context,
            config=LLMAutoContextSummarizationConfig(max_context_tokens=8000),
            summarizer=OpenAISummarizer(model="gpt-4o-mini"),
        )
        pipeline = Pipeline([transport.input(), stt, user_agg, summarizer, llm, tts,
                             transport.output(), assistant_agg])

    Args:
        context: The ``LLMContext`` shared with ``LLMContextAggregatorPair``.
        config: Pipecat's ``LLMAutoContextSummarizationConfig`` (or the deprecated
            ``LLMContextSummarizationConfig``); defaults to Pipecat's defaults.
        summarizer: The secondary LLM: a :class:`Summarizer` (for example
            ``OpenAISummarizer``) or any Pipecat ``LLMService``. Defaults to
            ``config.summary_config.llm``.
        options: Options beyond Pipecat's config.
        **kwargs: Passed to ``FrameProcessor``.

    Raises:
        ValueError: If no summarizer is configured or the config would re-trigger every turn.
    """

    def __init__(
        self,
        *,
        context: LLMContext,
        config: LLMAutoContextSummarizationConfig | Any = None,
        summarizer: Summarizer | LLMService | None = None,
        options: SummarizerOptions | None = None,
        **kwargs,
    ):
        """Initialize the processor."""
        super().__init__(**kwargs)
        if not isinstance(context, LLMContext):
            raise TypeError("context must be the LLMContext shared with the aggregators")
        self._context = context
        self._config = _as_auto_config(config)
        validate_config(self._config)
        self._options = options or SummarizerOptions()
        if summarizer is None:
            summarizer = self._config.summary_config.llm
        if summarizer is None:
            raise ValueError(
                "ContextSummarizer needs a summarizer: pass summarizer=OpenAISummarizer(...) "
                "(or any LLMService), or set LLMContextSummaryConfig(llm=...)"
            )
        self._summarizer = _as_summarizer(summarizer)
        self._protected = make_protection(
            protect_injected_system=self._options.protect_injected_system
        )
        self._meter = ContextMeter(
            self._options.token_counter or EstimateTokenCounter(), self._protected
        )
        self._failures = FailureTracker(
            backoff_s=self._options.retry_backoff_s,
            max_backoff_s=self._options.max_retry_backoff_s,
            error_after=self._options.error_after_failures,
        )
        self._task: asyncio.Task | None = None
        self._manual_pending: LLMContextSummaryConfig | None = None
        self._manual_waiting = False
        self._summary_message: dict | None = None
        self._summary_text: str | None = None
        self._no_plan_at: int | None = None
        self._compactions = 0
        self._register_event_handler("on_summary_applied")
        self._register_event_handler("on_summary_failed")

    @property
    def config(self) -> LLMAutoContextSummarizationConfig:
        """The auto-summarization config in use."""
        return self._config

    @property
    def summary_in_flight(self) -> bool:
        """True while a background summary is running."""
        return self._task is not None and not self._task.done()

    @property
    def summary_text(self) -> str | None:
        """The text of the summary currently in the context, if any."""
        if self._summary_message is None or not any(
            m is self._summary_message for m in self._context.messages
        ):
            return None
        return self._summary_text

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Watch context frames, start summaries, and push every frame on.

        Args:
            frame: The frame.
            direction: Its direction.
        """
        await super().process_frame(frame, direction)

        if isinstance(frame, LLMSummarizeContextFrame):
            # Ours to handle; the built-in summarizer downstream must not run it too.
            self._start_manual(frame.config)
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._cancel_task()
        elif (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.DOWNSTREAM
            and not frame.speculation
            and frame.context is self._context
        ):
            self._check()
        await self.push_frame(frame, direction)

    async def cleanup(self):
        """Cancel the in-flight summary and clean up."""
        await self._cancel_task()
        await super().cleanup()

    # -- deciding -------------------------------------------------------------------------

    def _check(self) -> None:
        if self.summary_in_flight:
            return
        messages = self._context.messages
        m = self._meter.measure(messages, self._summary_message)
        reason = trigger_reason(self._config, m)
        if reason is None or not self._failures.ready(time.monotonic()):
            return
        if self._no_plan_at == len(messages):
            return  # nothing selectable has been added since the last empty plan
        if not self._start(reason, self._config.summary_config, self._summarizer):
            self._no_plan_at = len(messages)

    def _start_manual(self, override: LLMContextSummaryConfig | None) -> None:
        config = override or self._config.summary_config
        if self.summary_in_flight:
            logger.debug(f"{self}: summary in flight; manual summary queued")
            self._manual_pending = config
            self._manual_waiting = True
            return
        summarizer = PipecatLLMSummarizer(override.llm) if override and override.llm else None
        if not self._start("manual", config, summarizer or self._summarizer):
            logger.info(f"{self}: manual summary requested, but nothing can be summarized")

    def _start(self, reason: Reason, config: LLMContextSummaryConfig, summarizer: Summarizer):
        messages = self._context.messages
        counter = self._meter.counter
        present = self._summary_message is not None and any(
            msg is self._summary_message for msg in messages
        )
        previous = self._summary_text if present else None
        previous_tokens = count_text(counter, previous) if previous else 0
        budget = self._options.max_summary_input_tokens
        plan = select(
            messages,
            keep=config.min_messages_after_summary,
            counter=counter,
            summary_message=self._summary_message if present else None,
            previous_summary_tokens=previous_tokens,
            input_budget=budget,
            protect_injected_system=self._options.protect_injected_system,
        )
        if plan is None:
            return False
        if reason == "tokens" and self._config.max_context_tokens:
            gain = plan.input_tokens - previous_tokens
            if gain < self._options.min_token_gain * self._config.max_context_tokens:
                logger.debug(f"{self}: token threshold tripped, but only {gain} tokens to gain")
                return False
        shorten_to = 2000
        if plan.shortened and budget:
            shorten_to = max(200, budget * 4 // (2 * len(plan.shortened)))
        request = build_request(
            plan.summarized,
            previous_summary=previous,
            max_tokens=config.target_context_tokens,
            prompt=config.summarization_prompt,
            shortened=plan.shortened,
            shorten_to_chars=shorten_to,
        )
        job = _Job(plan, request, reason, config, summarizer, time.monotonic())
        logger.debug(
            f"{self}: summarizing {len(plan.summarized)} messages ({reason}), "
            f"~{plan.input_tokens} input tokens, {plan.deferred} deferred"
        )
        self._task = self.create_task(self._run(job), f"{self}::summary")
        return True

    # -- running --------------------------------------------------------------------------

    async def _run(self, job: _Job) -> None:
        timeout = job.config.summarization_timeout
        try:
            try:
                text = clean_summary(
                    await asyncio.wait_for(job.summarizer.summarize(job.request), timeout)
                )
            except TimeoutError:
                await self._failed(job, f"summarizer timed out after {timeout}s")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any backend error leaves the context untouched
                await self._failed(job, f"{type(e).__name__}: {e}")
            else:
                await self._apply(job, text)
        finally:
            self._task = None
        if self._manual_waiting:
            config, self._manual_pending, self._manual_waiting = self._manual_pending, None, False
            self._start_manual(config if config is not self._config.summary_config else None)

    async def _failed(self, job: _Job, error: str) -> None:
        delay, escalate = self._failures.failed(time.monotonic())
        n = self._failures.consecutive
        logger.warning(
            f"{self}: summary failed ({error}); context left untouched, "
            f"failure {n} in a row, next automatic attempt in {delay:.1f}s"
        )
        if escalate:
            logger.error(
                f"{self}: context summarization has failed {n} times in a row; the context "
                "keeps growing until the summarizer recovers"
            )
        await self._call_event_handler(
            "on_summary_failed", SummaryFailedEvent(error, n, job.reason, delay)
        )

    async def _apply(self, job: _Job, text: str) -> None:
        content = _render(job.config.summary_message_template, text)
        summary_message = {"role": self._options.summary_role, "content": content}
        messages = self._context.messages
        new_messages = splice(messages, job.plan, summary_message)
        if new_messages is None:
            logger.warning(
                f"{self}: context changed while summarizing (the summarized messages are no "
                "longer in place); summary discarded, nothing applied"
            )
            return
        before = self._meter.measure(messages, self._summary_message)
        start = next(i for i, m in enumerate(messages) if m is job.plan.replaced[0])
        # Synchronous from here: no await between the identity check and the rewrite.
        self._context.set_messages(new_messages)
        self._summary_message, self._summary_text = summary_message, text
        self._no_plan_at = None
        self._failures.succeeded()
        after = self._meter.measure(self._context.messages, summary_message)
        self._compactions += 1
        event = SummaryAppliedEvent(
            reason=job.reason,
            messages_before=before.message_count,
            messages_after=after.message_count,
            messages_summarized=len(job.plan.summarized),
            messages_kept=before.message_count - start - len(job.plan.replaced),
            tokens_before=before.total_tokens,
            tokens_after=after.total_tokens,
            summary_tokens=self._meter.counter.count_message(summary_message),
            input_tokens=job.plan.input_tokens
            + count_text(self._meter.counter, job.request.system_prompt),
            latency_s=time.monotonic() - job.started,
            summary_sha256=short_sha256(text),
            compaction=self._compactions,
        )
        logger.info(f"{self}: {event.log_line()}")
        await self.push_frame(
            ContextSummaryAppliedFrame(message=summary_message, event=event),
            FrameDirection.UPSTREAM,
        )
        await self._call_event_handler("on_summary_applied", event)

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        self._manual_waiting = False
        if task is not None and not task.done():
            await self.cancel_task(task)
