"""``ContextSummarizer``: the Pipecat shell around the pure planning core.

It decides when (``policy``), asks what (``plan``), runs one background summary at a time,
and applies the result with a synchronous, identity-checked splice of the shared context.
Frames are never held: every frame is pushed on unchanged, except the manual
``LLMSummarizeContextFrame``, which this processor consumes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    LLMContextFrame,
    LLMSummarizeContextFrame,
    StartFrame,
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
    MessagesEvictedEvent,
    Reason,
    SummaryAppliedEvent,
    SummaryFailedEvent,
    short_sha256,
)
from pipecat_summarizer.guard import LLMRequestGuard, overhead_key, request_overhead
from pipecat_summarizer.pinned import Fact, PinnedFacts, normalize
from pipecat_summarizer.plan import (
    Plan,
    blocked_reason,
    evict_for_ceiling,
    head_length,
    locate,
    make_protection,
    select,
    splice,
    split_pending,
    with_pending,
)
from pipecat_summarizer.policy import (
    FailureTracker,
    StepFailures,
    chain_backlog,
    effective_timeout,
    summary_budget,
    trigger_reason,
    validate_config,
    validate_summary_config,
)
from pipecat_summarizer.prompt import SummaryRequest, build_request
from pipecat_summarizer.recall import RecallParams
from pipecat_summarizer.recall_shell import RecallStep
from pipecat_summarizer.sections import parse_sections, with_items, without_items
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.store.recorder import CallRecorder, MemoryOptions
from pipecat_summarizer.summarizers.base import (
    Summarizer,
    SummaryResult,
    as_result,
    describe_error,
    is_async_summarizer,
)
from pipecat_summarizer.summarizers.extractive import pinnable_facts
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer
from pipecat_summarizer.tokens import (
    ContextMeter,
    EstimateTokenCounter,
    Measurement,
    TokenCounter,
    as_token_counter,
    content_fingerprint,
    count_text,
)
from pipecat_summarizer.validation import validate_numeric_fields


@dataclass
class SummarizerOptions:
    """Options beyond Pipecat's config, each with a safe default.

    Parameters:
        max_summary_input_tokens: Budget for what one summary request sends (previous
            summary and transcript). Whole units are taken oldest first; the rest waits for
            the next round. ``None`` for unbounded.
        token_counter: Per-message token counter; defaults to the Pipecat-compatible
            estimate. Pass ``TokenizerCounter(encoding)`` for exact counts; a raw tokenizer
            with ``encode()`` (a tiktoken ``Encoding``) is wrapped in it, anything else
            without ``count_message()`` is rejected with a ``TypeError``.
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
        soft_trigger_ratio: Start summarizing at this share of ``max_context_tokens``, so the
            summary usually lands before the threshold itself is reached (1.0 waits for it).
            The message threshold keeps Pipecat's exact meaning.
        max_request_tokens: Hard ceiling on the context the main LLM receives. When a
            request would exceed it and no summary is ready, the oldest whole units are
            moved to a pending queue that the next summary consumes first. ``None`` (the
            default) disables the ceiling.
        eviction_target_ratio: Once over ``max_request_tokens``, evict down to this share of
            it in one step, so the prefix stays stable for several turns and a tool call's
            follow-up request (which goes from the assistant aggregator straight to the LLM,
            past this processor) has room.
        pinned_facts_tokens: Token budget of the pinned-facts block.
        pin_summary_facts: Pin the FACTS and CONSTRAINTS of every summary.
        pin_evicted_facts: When the ceiling evicts messages (no summary was ready), pin the
            salient facts found in them at once with the offline extractive summarizer, so an
            allergy stated before a summarizer outage stays in view until the backlog is
            summarized.
        pinned_role: Role of the message holding the facts the application pinned
            (``pin(..., source="app")``), the only facts rendered with authority.
            ``"developer"`` (the default) is what Pipecat recommends for supplementary
            guidance; adapters that lack the role send it as a user message. A leading
            ``"system"`` message would be dropped by non-OpenAI adapters when the service has
            a ``system_instruction``. Facts from the conversation (summaries, evicted
            messages, ``remember_fact``) always go in a user-role message, as quoted data.
        log_content: Also log message, fact and error text, at DEBUG only, for local
            debugging. Log lines at INFO and above never carry conversation or fact text
            (counts, ids, roles and hashes only), whatever this says.
        unresolved_tool_call_turns: A tool call whose result has not arrived after this many
            user turns no longer holds back compaction: it is summarized as called, with no
            result (a result that arrives later finds its placeholder gone). ``None`` waits
            forever.
        auto_summarize: Summarize when Pipecat's thresholds trip. ``False`` is Pipecat's
            default mode (``enable_auto_context_summarization=False``): only manual
            ``LLMSummarizeContextFrame`` requests start a summary, plus the backlog of
            messages the ceiling evicted, which only a summary can bring back.
    """

    max_summary_input_tokens: int | None = 8000
    token_counter: TokenCounter | None = None
    protect_injected_system: bool = True
    min_token_gain: float = 0.1
    retry_backoff_s: float = 5.0
    max_retry_backoff_s: float = 120.0
    error_after_failures: int = 3
    summary_role: str = "user"
    soft_trigger_ratio: float = 0.8
    max_request_tokens: int | None = None
    eviction_target_ratio: float = 0.75
    pinned_facts_tokens: int = 300
    pin_summary_facts: bool = True
    pin_evicted_facts: bool = True
    pinned_role: str = "developer"
    auto_summarize: bool = True
    log_content: bool = False
    unresolved_tool_call_turns: int | None = 3

    def __post_init__(self):
        """Validate the options."""
        # every int/float field, by annotation: NaN, infinity, strings and bools fail here,
        # named, before the range checks below (which NaN would pass)
        validate_numeric_fields(self)
        if self.max_summary_input_tokens is not None and self.max_summary_input_tokens < 100:
            raise ValueError("max_summary_input_tokens must be at least 100 (or None)")
        if not 0 <= self.min_token_gain < 1:
            raise ValueError("min_token_gain must be in [0, 1)")
        if self.retry_backoff_s < 0 or self.max_retry_backoff_s < 0:
            raise ValueError("retry backoff must not be negative")
        if self.error_after_failures < 1:
            raise ValueError("error_after_failures must be at least 1")
        if self.summary_role not in ("user", "assistant"):
            # a system/developer summary would be taken for part of the system prompt
            raise ValueError("summary_role must be 'user' or 'assistant'")
        if self.pinned_role not in ("system", "developer"):
            raise ValueError("pinned_role must be system or developer")
        if not 0.1 <= self.soft_trigger_ratio <= 1:
            raise ValueError("soft_trigger_ratio must be in [0.1, 1]")
        if not 0.1 <= self.eviction_target_ratio <= 1:
            raise ValueError("eviction_target_ratio must be in [0.1, 1]")
        if self.max_request_tokens is not None and self.max_request_tokens < 200:
            raise ValueError("max_request_tokens must be at least 200 (or None)")
        if self.pinned_facts_tokens < 20:
            raise ValueError("pinned_facts_tokens must be at least 20")
        if self.unresolved_tool_call_turns is not None and self.unresolved_tool_call_turns < 1:
            raise ValueError("unresolved_tool_call_turns must be at least 1 (or None)")
        if self.token_counter is not None:
            self.token_counter = as_token_counter(self.token_counter)


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
    if not is_async_summarizer(summarizer):
        # a sync summarize() would block the event loop, or return a non-awaitable that
        # fails only at the first summary, far from the cause
        raise TypeError(
            "summarizer must have an async summarize(request) method (a coroutine "
            f"function) or be an LLMService; got {type(summarizer).__name__}"
        )
    return summarizer


# The same internal step failing on this many frames in a row stops summarization for the
# call: retrying it every turn would only repeat the error.
_STEP_FAILURE_LIMIT = 3


def _clock() -> float:
    """The running event loop's clock, on which backoff and latency are measured.

    ``time.monotonic()`` on a standard loop. Reading the loop's clock (not the wall clock)
    is a documented hook: a simulated-time loop (the replay's) governs the retry backoff
    too, so a replay in compressed time keeps the real 5 s to 120 s schedule.
    """
    return asyncio.get_running_loop().time()


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
        on_messages_evicted(processor, MessagesEvictedEvent)

    Example::

        summarizer = ContextSummarizer(
            context=context,
            config=LLMAutoContextSummarizationConfig(max_context_tokens=8000),
            summarizer=OpenAISummarizer(model="gpt-4o-mini"),
        )
        pipeline = Pipeline([transport.input(), stt, user_agg, summarizer, llm,
                             summarizer.after_llm(), tts, transport.output(), assistant_agg])

    ``summarizer.after_llm()`` is the companion placed right after the main LLM: it holds the
    ceiling on tool-call follow-ups and takes ``LLMSummarizeContextFrame`` queued by function
    handlers (see :class:`~pipecat_summarizer.guard.LLMRequestGuard`).

    Args:
        context: The ``LLMContext`` shared with ``LLMContextAggregatorPair``.
        config: Pipecat's ``LLMAutoContextSummarizationConfig`` (or the deprecated
            ``LLMContextSummarizationConfig``); defaults to Pipecat's defaults.
        summarizer: The secondary LLM: a :class:`Summarizer` (for example
            ``OpenAISummarizer``) or any Pipecat ``LLMService``. Defaults to
            ``config.summary_config.llm``.
        options: Options beyond Pipecat's config.
        llm: The main LLM service, so the ceiling (``max_request_tokens``) also counts its
            ``system_instruction`` (with the instructions Pipecat appends to it) and the
            tool schemas it sends. Not needed when the guard from :meth:`after_llm` sits
            right after the LLM: it attaches the LLM at start.
        store: A :class:`~pipecat_summarizer.store.MemoryStore` (``SQLiteMemoryStore``,
            ``PostgresMemoryStore``) that records every compaction, every message that
            leaves the context, the pinned facts' history and the call's final state, off
            the hot path; and gives a returning caller's call their memory. ``None`` (the
            default): nothing is recorded, behaviour as without it.
        call_id: This call's id in the store (a random one if not given).
        user_id: The caller's id: their earlier calls' memory is loaded at the first turn.
        memory: How the store is used (resume on/off, budgets, timeouts, queue).
        recall: Bring archived details back: on each user turn, the store's best matches
            for the latest user message that are not in view go in one bounded
            user-role "recalled from earlier" message before it (see
            :class:`~pipecat_summarizer.recall.RecallParams`). Needs ``store``.
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
        llm: LLMService | None = None,
        store: MemoryStore | None = None,
        call_id: str | None = None,
        user_id: str | None = None,
        memory: MemoryOptions | None = None,
        recall: RecallParams | None = None,
        **kwargs,
    ):
        """Initialize the processor."""
        super().__init__(**kwargs)
        if not isinstance(context, LLMContext):
            raise TypeError("context must be the LLMContext shared with the aggregators")
        self._context = context
        self._config = _as_auto_config(config)
        if options is not None and not isinstance(options, SummarizerOptions):
            raise TypeError(f"options must be a SummarizerOptions, got {type(options).__name__}")
        self._options = options or SummarizerOptions()
        validate_config(self._config)
        if summarizer is None:
            summarizer = self._config.summary_config.llm
        if summarizer is None:
            raise ValueError(
                "ContextSummarizer needs a summarizer: pass summarizer=OpenAISummarizer(...) "
                "(or any LLMService), or set LLMContextSummaryConfig(llm=...)"
            )
        self._summarizer = _as_summarizer(summarizer)
        # Clients this processor built itself are its to close at End/Cancel/cleanup; a
        # summarizer the application passed in is the application's (it may be shared).
        self._owned: list[Any] = [] if self._summarizer is summarizer else [self._summarizer]
        self._protected = make_protection(
            protect_injected_system=self._options.protect_injected_system
        )
        self._meter = ContextMeter(
            as_token_counter(self._options.token_counter or EstimateTokenCounter()),
            # the conversation-facts message is never summarized, like the head
            lambda i, m, ms: (
                m is self._facts_message or m is self._recalled() or self._protected(i, m, ms)
            ),
        )
        self._facts_message: dict | None = None  # conversation facts, user role
        self._llm: LLMService | None = None
        self._overhead_key: tuple | None = None
        self._overhead_tokens = 0
        if llm is not None:
            self.attach_llm(llm)
        self._failures = FailureTracker(
            backoff_s=self._options.retry_backoff_s,
            max_backoff_s=self._options.max_retry_backoff_s,
            error_after=self._options.error_after_failures,
        )
        self._pinned = PinnedFacts(self._options.pinned_facts_tokens)
        self._pinned_message: dict | None = None
        self._pinned_version = -1
        self._folded: list[Fact] = []  # facts over the pinned budget, for the next summary
        self._pending: list = []  # evicted under the ceiling, oldest first
        self._task: asyncio.Task | None = None
        self._manual_waiting = False
        self._manual_pending: LLMContextSummaryConfig | None = None
        self._summary_message: dict | None = None
        self._summary_text: str | None = None
        self._summary_config = self._config.summary_config  # template of the current summary
        self._no_plan_at: int | None = None
        self._no_evict: tuple | None = None  # (fingerprint, overhead) nothing could leave
        # the processor's own per-frame work: which step runs, and its failures in a row
        self._step = "counting"
        self._step_failures = StepFailures(_STEP_FAILURE_LIMIT)
        self._blocked: str | None = None  # why the last due compaction could not start
        self._warned_blocked: set[str] = set()
        self._replan_at_tokens = 0  # a too-small token compaction waits for this many
        self._summary_tokens = 0
        self._compactions = 0
        self._register_event_handler("on_summary_applied")
        self._register_event_handler("on_summary_failed")
        self._register_event_handler("on_messages_evicted")
        # durable memory: one more sink for the same moments (see the store hooks below)
        if store is None and memory is not None:
            raise ValueError("memory options need a store (store=SQLiteMemoryStore(...))")
        self._recorder = (
            CallRecorder(store, call_id, user_id, memory) if store is not None else None
        )
        # recall: archived details back in view (see the recall hooks below)
        self._recall: RecallStep | None = None
        if recall is not None:
            if not isinstance(recall, RecallParams):
                raise TypeError(f"recall must be a RecallParams, got {type(recall).__name__}")
            if self._recorder is None:
                raise ValueError("recall needs a store (store=SQLiteMemoryStore(...))")
            self._recall = RecallStep(
                store,
                recall,
                call_id=self._recorder.call_id,
                user_id=user_id,
                count=lambda text: count_text(self._meter.counter, text),
            )

    # -- public surface -------------------------------------------------------------------

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
        return self._summary_text if self._summary_present(self._context.messages) else None

    @property
    def pinned_facts(self) -> list[Fact]:
        """The pinned facts, in the order they are rendered."""
        return self._pinned.facts

    @property
    def pending_messages(self) -> list:
        """Messages evicted under the ceiling that still wait for a summary (a copy)."""
        return list(self._pending)

    def after_llm(self) -> LLMRequestGuard:
        """The companion processor to place right after the main LLM.

        Requests the processor cannot see otherwise pass through it: the follow-up after a
        tool call (pushed upstream by the assistant aggregator straight to the LLM) is held
        to ``max_request_tokens`` by the same eviction, and ``LLMSummarizeContextFrame``
        queued by a function handler (``params.llm.queue_frame(...)``, which goes
        downstream from the LLM) is summarized here on the secondary LLM instead of by
        Pipecat's built-in on the main LLM. It also lets the ceiling count the LLM's
        ``system_instruction`` and tool schemas. Example::

            Pipeline([user_agg, summarizer, llm, summarizer.after_llm(), tts,
                      transport.output(), assistant_agg])

        Returns:
            A new :class:`~pipecat_summarizer.guard.LLMRequestGuard` bound to this processor.
        """
        return LLMRequestGuard(self)

    def attach_llm(self, llm: LLMService) -> None:
        """Count ``llm``'s ``system_instruction`` and tool schemas under the ceiling.

        Args:
            llm: The main LLM service.

        Raises:
            TypeError: If ``llm`` is not a Pipecat ``LLMService``.
        """
        if not isinstance(llm, LLMService):
            raise TypeError(f"llm must be a Pipecat LLMService, got {type(llm).__name__}")
        self._llm = llm
        self._overhead_key = None

    def request_overhead_tokens(self) -> int:
        """Tokens every request carries besides the messages: the main LLM's
        ``system_instruction`` (when the LLM is known) and the context's tool schemas."""
        system = None
        if self._llm is not None:
            system = getattr(self._llm.settings, "system_instruction", None)
            system = system if isinstance(system, str) else None
        tools = self._context.tools
        key = overhead_key(system, tools, self._llm)
        if key != self._overhead_key:
            self._overhead_key = key
            self._overhead_tokens = request_overhead(
                self._meter.counter.counter, system_instruction=system, tools=tools, llm=self._llm
            )
        return self._overhead_tokens

    @property
    def context(self) -> LLMContext:
        """The shared context this processor compacts."""
        return self._context

    @property
    def llm(self) -> LLMService | None:
        """The main LLM whose ``system_instruction`` and tools the ceiling counts, if known."""
        return self._llm

    async def prepare_request(self) -> None:
        """Make the context ready for a request this processor did not see go by: pinned
        facts in place, under ``max_request_tokens``. Called by :class:`LLMRequestGuard`
        for the follow-up after a tool call. Never raises: a failure is logged and the
        request goes out as it is."""
        await self._guarded(self._prepare_request)

    def request_manual_summary(self, config: LLMContextSummaryConfig | None = None) -> None:
        """Start a manual summary (queued behind one in flight), as
        ``LLMSummarizeContextFrame(config=...)`` does.

        Args:
            config: A config override, honoured fully; ``None`` for the processor's own.
        """
        self._start_manual(config)

    def pin(self, key: str, text: str, *, kind: str = "fact", source: str = "app") -> None:
        """Pin a fact under ``key`` (replacing any fact with that key) in every request.

        Args:
            key: The fact's key, for example ``"allergy"``.
            text: The fact, for example ``"allergic to peanuts"``.
            kind: ``"fact"`` or ``"constraint"``.
            source: Who pins it. ``"app"`` (the default) is the application: only these facts
                are rendered with authority (in a ``pinned_role`` message) and they are the
                last to leave when the facts are over budget. ``"llm"`` (the
                ``remember_fact`` tool) and ``"summary"`` are conversation facts, rendered
                as quoted data in a user-role message.

        Raises:
            ValueError: If the key or text is empty, or the kind unknown.
        """
        if kind not in ("fact", "constraint"):
            raise ValueError("kind must be 'fact' or 'constraint'")
        if source not in ("app", "llm", "summary"):
            raise ValueError("source must be 'app', 'llm' or 'summary'")
        if self._pinned.pin(key, text, kind=kind, source=source):  # type: ignore[arg-type]
            self._enforce_pinned_budget()
            self._sync_pinned()

    def unpin(self, key: str) -> bool:
        """Remove the pinned fact under ``key``.

        Returns:
            True if a fact was removed.
        """
        removed = self._pinned.unpin(key)
        if removed:
            self._sync_pinned()
            self._refresh_summary()
        return removed

    def _set_messages(self, messages: list) -> None:
        # The meter's cheap append check cannot see a rewrite that keeps the length.
        self._context.set_messages(self._placed(messages))
        self._meter.invalidate()

    def _placed(self, messages: list) -> list:
        """``messages`` with the conversation-facts message right after the head.

        The plan functions work on the context without it (see :meth:`_view`), so every
        rewrite puts it back here: after the system head, before the summary.
        """
        facts = self._facts_message
        if facts is None:
            return messages
        rest = [m for m in messages if m is not facts]
        head = head_length(rest)
        return [*rest[:head], facts, *rest[head:]]

    def _view(self, messages: list) -> list:
        """The context as the plan functions see it: without the conversation-facts message,
        which is neither head nor conversation (never summarized, never evicted), nor the
        recalled message (this turn's only: never summarized, evicted or archived)."""
        facts, recalled = self._facts_message, self._recalled()
        if facts is None and recalled is None:
            return messages
        return [m for m in messages if m is not facts and m is not recalled]

    # -- frames ---------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Watch context frames, start summaries, and push every frame on.

        Args:
            frame: The frame.
            direction: Its direction.
        """
        await super().process_frame(frame, direction)

        if isinstance(frame, StartFrame) and self._recorder is not None:
            self._recorder.start()  # the writer's task, and the caller's memory loading
        if isinstance(frame, LLMSummarizeContextFrame):
            # Ours to handle; the built-in summarizer downstream must not run it too.
            await self._guarded(self._start_manual, frame.config)
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._cancel_task()
            if self._recorder is not None:
                await self._store_end("end" if isinstance(frame, EndFrame) else "cancel")
            await self._close_owned()
        elif (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.DOWNSTREAM
            and not frame.speculation
            and frame.context is self._context
        ):
            if self._recall is not None:
                self._recall_clear()
            await self._guarded(self._on_context_frame)
            if self._recall is not None:
                await self._recall_turn()
        await self.push_frame(frame, direction)

    async def _guarded(self, work, *args) -> None:
        """Run this processor's own work for a frame; no exception in it costs the frame.

        A failure is logged as one ERROR naming the step and the exception type (never its
        text, which may quote the conversation); the next frame tries again. The same step
        failing on ``_STEP_FAILURE_LIMIT`` frames in a row stops summarization for the call
        (one more ERROR); frames keep flowing unchanged.
        """
        if self._step_failures.disabled:
            return
        self._step = "counting"
        try:
            result = work(*args)
            if asyncio.iscoroutine(result):
                await result
        except Exception as e:
            await self._step_failed(self._step, e)
        else:
            self._step_failures.succeeded()

    async def _step_failed(self, step: str, error: BaseException) -> None:
        if self._options.log_content:
            logger.opt(exception=error).debug(f"{self}: {step} failed")
        logger.error(
            f"{self}: {step} failed ({type(error).__name__}); the frame goes on unchanged, "
            "the next turn tries again"
        )
        if self._step_failures.failed(step):
            logger.error(
                f"{self}: {step} failed {self._step_failures.streak} turns in a row; "
                "summarization stopped for this call (the call goes on, context as it is)"
            )
            await self._cancel_task()

    async def cleanup(self):
        """Cancel the in-flight summary, close the clients this processor built, clean up."""
        await self._cancel_task()
        if self._recorder is not None:
            await self._store_end("cleanup")
        await self._close_owned()
        await super().cleanup()

    # -- the per-turn hot path --------------------------------------------------------------

    async def _on_context_frame(self) -> None:
        if self._recorder is not None:
            await self._store_turn()
        m = await self._prepare_request()
        if self.summary_in_flight or not self._failures.ready(_clock()):
            return
        self._step = "planning"
        reason = None
        if self._options.auto_summarize:
            reason = trigger_reason(self._config, m, self._options.soft_trigger_ratio)
        if reason == "tokens" and m.reducible_tokens < self._replan_at_tokens:
            reason = None  # the last token plan gained too little; wait until it would
        if reason is None and self._pending:
            reason = "backlog"
        if reason is None or self._no_plan_at == m.message_count:
            return  # nothing selectable has been added since the last empty plan
        if not self._start(reason, self._config.summary_config, self._summarizer):
            self._no_plan_at = m.message_count
            self._warn_blocked(reason)

    def _warn_blocked(self, reason: Reason) -> None:
        """One WARNING per cause (until a summary lands) when a due compaction cannot start."""
        cause = self._blocked
        if cause is None or cause in self._warned_blocked:
            return
        self._warned_blocked.add(cause)
        logger.warning(
            f"{self}: compaction is due ({reason}) but cannot start: {cause}; "
            f"{len(self._pending)} messages pending, the context grows until this changes"
        )

    def _pending_discarded(self, messages: list, reason: str) -> None:
        """Pending (evicted, unsummarized) messages leave the processor for good.

        The one place they go: a store sink hooks in here to archive them.

        Args:
            messages: The messages, oldest first.
            reason: Why, for the log (no conversation text).
        """
        logger.info(f"{self}: {len(messages)} pending messages dropped, not summarized ({reason})")
        if self._recorder is not None:
            self._recorder.archive(messages, "replaced")

    def _check_replaced(self, m: Measurement | None = None) -> None:
        """Drop the pending queue once the application replaced the context: its messages
        belong to the old conversation and must not be summarized into the new one."""
        if m is None:
            self._meter.measure(self._context.messages, self._summary_message)
        if not self._meter.take_replaced():
            return
        self._no_plan_at = None  # a new conversation: plan it afresh
        self._warned_blocked.clear()
        if self._pending:
            dropped, self._pending = self._pending, []
            self._pending_discarded(dropped, "the context was replaced")

    async def _prepare_request(self) -> Measurement:
        """Make the context ready to be sent: pinned facts in place, under the ceiling.

        Runs for every request the main LLM receives: the user turns this processor sees,
        and (through :class:`LLMRequestGuard`) the follow-ups after tool calls.
        """
        self._step = "pinning"
        self._sync_pinned()
        self._step = "counting"
        m = self._meter.measure(self._context.messages, self._summary_message)
        self._check_replaced(m)
        ceiling = self._options.max_request_tokens
        if ceiling is None:
            return m
        overhead = self.request_overhead_tokens()
        if m.total_tokens + overhead > ceiling and not self._nothing_to_evict(overhead):
            self._step = "eviction"
            await self._evict(ceiling, overhead)
            m = self._meter.measure(self._context.messages, self._summary_message)
        return m

    def _nothing_to_evict(self, overhead: int) -> bool:
        """True when eviction already found nothing to move from this very content
        (remembered by a fingerprint, not a message count, so any change retries)."""
        if self._no_evict is None:
            return False
        return self._no_evict == (content_fingerprint(self._context.messages), overhead)

    def _sync_pinned(self) -> None:
        """Put the pinned facts in place, rewritten only on change.

        Authority follows the source: the application's facts go in a ``pinned_role``
        block inside the system head; facts from the conversation go in one user-role
        message right after the head (before the summary), as quoted data.
        """
        if self._pinned_message is None and self._facts_message is None and not len(self._pinned):
            return  # the common case on the hot path: nothing pinned
        messages = self._context.messages
        head = head_length(messages)
        at = next((i for i in range(head) if messages[i] is self._pinned_message), None)
        app_in_place = at is not None or self._pinned_message is None
        facts_in_place = self._facts_message is None or (
            head < len(messages) and messages[head] is self._facts_message
        )
        if app_in_place and facts_in_place and self._pinned_version == self._pinned.version:
            return
        self._pinned_version = self._pinned.version
        if self._recorder is not None:
            self._recorder.facts_changed(self._pinned)
        new, changed = list(messages), not (app_in_place and facts_in_place)
        app_text = self._pinned.render_app()
        if app_text is None:
            if at is not None:
                del new[at]
                changed = True
            self._pinned_message = None
        elif at is None or self._pinned_message["content"] != app_text:
            block = {"role": self._options.pinned_role, "content": app_text}
            if at is None:
                new.insert(head, block)
            else:
                new[at] = block
            self._pinned_message, changed = block, True
        old, noted_text = self._facts_message, self._pinned.render_noted()
        if noted_text is None:
            self._facts_message = None
        elif old is None or old["content"] != noted_text:
            self._facts_message = {"role": "user", "content": noted_text}
        if old is not None and self._facts_message is not old:
            new, changed = [m for m in new if m is not old], True
        elif self._facts_message is not None and old is None:
            changed = True
        if changed:
            self._set_messages(new)  # places the conversation facts after the head

    def _enforce_pinned_budget(self, applying: bool = False) -> None:
        if self.summary_in_flight and not applying:
            # Over budget for one summary's latency: folding now would hide the facts until
            # the summary lands, since the summary message cannot change while in flight.
            return
        removed = self._pinned.enforce_budget()
        # Summary facts that leave the block are still in the summary record (or, for facts
        # of evicted messages, in the pending queue); the others only lived in the block,
        # so they move into the summary, loudly.
        folded = [f for f in removed if f.source not in ("summary", "evicted")]
        if removed and len(removed) > len(folded):
            logger.debug(f"{self}: {len(removed) - len(folded)} summary facts left the block")
        if folded:
            logger.warning(
                f"{self}: pinned facts over their {self._pinned.budget_tokens}-token budget; "
                f"{len(folded)} least recent moved into the summary (sha256 "
                + ", ".join(short_sha256(f.text) for f in folded)
                + ")"
            )
            if self._options.log_content:
                logger.debug(f"{self}: moved facts: " + "; ".join(f.text for f in folded))
            self._folded.extend(folded)
        if removed and not applying:
            self._refresh_summary()

    def _refresh_summary(self) -> None:
        """Re-render the summary message after the pinned block changed.

        Facts in the block are left out of the summary message; when they leave the block
        (over budget, unpinned) they must show in the summary again, and facts that only
        lived in the block are written into the record. Never while a summary is in flight:
        its splice checks the current summary message by identity.
        """
        if self.summary_in_flight:
            return
        messages = self._context.messages
        present = self._summary_present(messages)
        if not present and not self._folded:
            return
        text = self._summary_text if present else ""
        if self._folded:
            text, self._folded = self._with_facts(text, self._folded), []
        message = self._summary_for(text, self._summary_config)
        if present and message["content"] == self._summary_message["content"]:
            return
        if present:
            at = next(i for i, m in enumerate(messages) if m is self._summary_message)
            new = [*messages[:at], message, *messages[at + 1 :]]
        else:
            at = head_length(messages)
            new = [*messages[:at], message, *messages[at:]]
        self._summary_message, self._summary_text = message, text
        self._summary_tokens = count_text(self._meter.counter, text)
        self._set_messages(new)

    @staticmethod
    def _with_facts(text: str | None, facts: list[Fact]) -> str:
        items: dict[str, list[str]] = {"FACTS": [], "CONSTRAINTS": []}
        for fact in facts:
            items["CONSTRAINTS" if fact.kind == "constraint" else "FACTS"].append(fact.text)
        return with_items(text or "", items, normalize)

    def _pin_from(self, messages: list) -> None:
        """Pin the salient facts of messages that leave the context unsummarized."""
        found = pinnable_facts(messages, max_tokens=self._pinned.budget_tokens)
        if any(found.values()) and self._pinned.merge_summary(found, source="evicted"):
            self._enforce_pinned_budget()
            self._sync_pinned()

    async def _evict(self, ceiling: int, overhead: int = 0) -> None:
        """Evict the oldest units so messages plus ``overhead`` (system_instruction, tool
        schemas) fit ``ceiling``; the conversation-facts message is never evicted."""
        evicted: list = []
        after = 0
        # Pinning the facts of evicted messages can grow the facts message: one more pass.
        for _ in range(2):
            fixed = overhead
            if self._facts_message is not None:
                fixed += self._meter.counter.count_message(self._facts_message)
            remaining, out = evict_for_ceiling(
                self._view(self._context.messages),
                ceiling=max(0, ceiling - fixed),
                counter=self._meter.counter,
                target=max(0, int(ceiling * self._options.eviction_target_ratio) - fixed),
                summary_message=self._summary_message,
                protect_injected_system=self._options.protect_injected_system,
                stale_after=self._options.unresolved_tool_call_turns,
            )
            if out:
                self._set_messages(remaining)
                self._pending.extend(out)
                evicted.extend(out)
                if self._options.pin_evicted_facts:
                    self._pin_from(out)
            m = self._meter.measure(self._context.messages, self._summary_message)
            after = m.total_tokens + overhead
            if not out or after <= ceiling:
                break
        self._no_evict = None
        if after > ceiling:
            # retry once the content changes
            self._no_evict = (content_fingerprint(self._context.messages), overhead)
            logger.warning(
                f"{self}: context is ~{after} tokens, over max_request_tokens={ceiling}, and "
                "nothing more can be evicted (system prompt, pinned facts, summary, "
                "unresolved tool calls and the current turn stay)"
            )
        if not evicted:
            return
        event = MessagesEvictedEvent(
            messages_evicted=len(evicted),
            tokens_evicted=sum(self._meter.counter.count_message(m) for m in evicted),
            pending_messages=len(self._pending),
            tokens_after=after,
            ceiling=ceiling,
        )
        logger.info(f"{self}: {event.log_line()}")
        if self._recorder is not None:
            self._recorder.archive(evicted, "evicted")
        await self._call_event_handler("on_messages_evicted", event)

    # -- starting a summary -----------------------------------------------------------------

    def _summary_present(self, messages: list) -> bool:
        return self._summary_message is not None and any(
            m is self._summary_message for m in messages
        )

    def _summary_for(self, text: str, config: LLMContextSummaryConfig) -> dict:
        # Facts shown in the pinned block are left out of the summary message, so they are
        # not paid for twice; the full record still rolls into the next summary.
        if self._options.pin_summary_facts and len(self._pinned):
            text = without_items(text, (f.text for f in self._pinned.facts), normalize)
        content = _render(config.summary_message_template, text)
        return {"role": self._options.summary_role, "content": content}

    def _start_manual(self, override: LLMContextSummaryConfig | None) -> None:
        config = override or self._config.summary_config
        if self.summary_in_flight:
            logger.debug(f"{self}: summary in flight; manual summary queued")
            self._manual_pending = override
            self._manual_waiting = True
            return
        if override is not None:
            try:
                validate_summary_config(override, "LLMSummarizeContextFrame.config")
            except (TypeError, ValueError) as e:
                # a frame is no place to crash the pipeline: the processor's own config runs
                logger.warning(f"{self}: manual summary config rejected ({e}); using default")
                override, config = None, self._config.summary_config
        summarizer = PipecatLLMSummarizer(override.llm) if override and override.llm else None
        if not self._start("manual", config, summarizer or self._summarizer):
            logger.info(f"{self}: manual summary requested, but nothing can be summarized")

    def _start(self, reason: Reason, config: LLMContextSummaryConfig, summarizer: Summarizer):
        self._step = "planning"
        self._blocked = None
        present = self._summary_present(self._context.messages)
        summary_message = self._summary_message if present else None
        messages = with_pending(self._view(self._context.messages), self._pending, summary_message)
        counter = self._meter.counter
        previous = self._summary_text if present else None
        previous_tokens = self._summary_tokens if previous else 0
        budget = self._options.max_summary_input_tokens
        plan = select(
            messages,
            keep=config.min_messages_after_summary,
            counter=counter,
            summary_message=summary_message,
            previous_summary_tokens=previous_tokens,
            input_budget=budget,
            protect_injected_system=self._options.protect_injected_system,
            stale_after=self._options.unresolved_tool_call_turns,
        )
        if plan is None:
            self._blocked = blocked_reason(
                messages,
                keep=config.min_messages_after_summary,
                summary_message=summary_message,
                protect_injected_system=self._options.protect_injected_system,
                stale_after=self._options.unresolved_tool_call_turns,
            )
            return False
        if reason == "tokens" and self._config.max_context_tokens:
            gain = plan.input_tokens - previous_tokens
            needed = self._options.min_token_gain * self._config.max_context_tokens
            if gain < needed:
                logger.debug(f"{self}: token threshold tripped, but only {gain} tokens to gain")
                measured = self._meter.measure(self._context.messages, self._summary_message)
                self._replan_at_tokens = measured.reducible_tokens + int(needed - gain)
                self._blocked = "too little to summarize outside the kept recent messages"
                return False
        self._step = "rendering"
        shorten_to = 2000
        if plan.shortened and budget:
            shorten_to = max(200, budget * 4 // (2 * len(plan.shortened)))
        request = build_request(
            plan.summarized,
            previous_summary=previous,
            # a manual override's budget is honoured as given; ours is capped (see policy)
            max_tokens=config.target_context_tokens
            if config is not self._config.summary_config
            else summary_budget(self._config),
            prompt=config.summarization_prompt,
            shortened=plan.shortened,
            shorten_to_chars=shorten_to,
        )
        job = _Job(plan, request, reason, config, summarizer, _clock())
        logger.debug(
            f"{self}: summarizing {len(plan.summarized)} messages ({reason}), "
            f"~{plan.input_tokens} input tokens, {plan.deferred} deferred"
        )
        self._task = self.create_task(self._run(job), f"{self}::summary")
        return True

    # -- running --------------------------------------------------------------------------

    async def _run(self, job: _Job) -> None:
        timeout = effective_timeout(job.config)
        try:
            try:
                result = as_result(
                    await asyncio.wait_for(job.summarizer.summarize(job.request), timeout)
                )
            except TimeoutError:
                await self._failed(job, f"summarizer timed out after {timeout}s")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any backend error leaves the context untouched
                self._log_error_content(e)
                await self._failed(job, describe_error(e))
            else:
                try:
                    await self._apply(job, result)
                except Exception as e:  # a malformed result must not kill the processor
                    # no logger.exception: loguru's traceback shows local variables (messages)
                    logger.error(f"{self}: applying the summary failed ({type(e).__name__})")
                    self._log_error_content(e)
                    await self._failed(job, f"{type(e).__name__} while applying")
        finally:
            self._task = None
        # the same guard as a frame's work: an error here must not end the task unreported
        await self._guarded(self._after_run)

    def _after_run(self) -> None:
        self._step = "pinning"
        self._enforce_pinned_budget()  # what was deferred while the summary ran
        self._refresh_summary()
        self._sync_pinned()
        if self._manual_waiting:
            override, self._manual_pending, self._manual_waiting = self._manual_pending, None, False
            self._start_manual(override)
        elif chain_backlog(
            pending=bool(self._pending),
            last_failed=self._failures.consecutive > 0,
            ready=self._failures.ready(_clock()),
        ):
            self._start("backlog", self._config.summary_config, self._summarizer)

    def _log_error_content(self, error: BaseException) -> None:
        if self._options.log_content:
            logger.opt(exception=error).debug(f"{self}: summary error detail: {error!r}")

    async def _close_owned(self) -> None:
        owned, self._owned = self._owned, []
        for client in owned:
            close = getattr(client, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as e:  # closing must never break End/Cancel
                logger.warning(f"{self}: closing the summarizer failed ({type(e).__name__})")

    async def _failed(self, job: _Job, error: str) -> None:
        delay, escalate = self._failures.failed(_clock())
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
        if self._recorder is not None:
            self._recorder.failed(
                job.reason, error, _clock() - job.started, getattr(job.summarizer, "model", None)
            )
        await self._call_event_handler(
            "on_summary_failed", SummaryFailedEvent(error, n, job.reason, delay)
        )

    async def _apply(self, job: _Job, result: SummaryResult) -> None:
        text = result.text
        self._check_replaced()  # a replaced context's pending messages are not spliced in
        messages = self._context.messages
        present = self._summary_present(messages)
        logical = with_pending(
            self._view(messages), self._pending, self._summary_message if present else None
        )
        # Check before touching anything; everything below up to set_messages is synchronous.
        start = locate(logical, job.plan)
        if start is None:
            logger.warning(
                f"{self}: context changed while summarizing (the summarized messages are no "
                "longer in place); summary discarded, nothing applied"
            )
            return
        self._failures.succeeded()
        if self._options.pin_summary_facts:
            sections = result.sections if result.sections is not None else parse_sections(text)
            if self._pinned.merge_summary(sections):
                self._enforce_pinned_budget(applying=True)
        if self._folded:  # facts that left the pinned block belong in the record
            text, self._folded = self._with_facts(text, self._folded), []
        summary_message = self._summary_for(text, job.config)
        new_logical = splice(logical, job.plan, summary_message, start)
        before = self._meter.measure(messages, self._summary_message)
        kept = len(logical) - start - len(job.plan.replaced)
        new_messages, self._pending = split_pending(new_logical, self._pending)
        self._set_messages(new_messages)
        # summarized messages leave the token cache, so it does not keep them alive
        self._meter.counter.forget_except([*new_messages, *self._pending])
        self._summary_message, self._summary_text = summary_message, text
        self._summary_config = job.config
        self._summary_tokens = count_text(self._meter.counter, text)
        self._no_plan_at = None
        self._warned_blocked.clear()
        self._replan_at_tokens = 0
        self._sync_pinned()
        after = self._meter.measure(self._context.messages, summary_message)
        self._compactions += 1
        event = SummaryAppliedEvent(
            reason=job.reason,
            messages_before=before.message_count,
            messages_after=after.message_count,
            messages_summarized=len(job.plan.summarized),
            messages_kept=kept,
            tokens_before=before.total_tokens,
            tokens_after=after.total_tokens,
            summary_tokens=self._meter.counter.count_message(summary_message),
            input_tokens=job.plan.input_tokens
            + count_text(self._meter.counter, job.request.system_prompt),
            latency_s=_clock() - job.started,
            summary_sha256=short_sha256(text),
            compaction=self._compactions,
            pending_messages=len(self._pending),
            pinned_facts=len(self._pinned),
        )
        logger.info(f"{self}: {event.log_line()}")
        if self._recorder is not None:
            model = getattr(job.summarizer, "model", None)
            self._recorder.applied(event, job.plan.summarized, text, model)
        await self.push_frame(
            ContextSummaryAppliedFrame(message=summary_message, event=event),
            FrameDirection.UPSTREAM,
        )
        await self._call_event_handler("on_summary_applied", event)

    # -- recall hooks: nothing here runs without recall=RecallParams(...) --------------------

    @property
    def recall_step(self) -> RecallStep | None:
        """The recall step (``None`` without ``recall=``): the ``recall_memory`` tool uses it."""
        return self._recall

    def _recalled(self) -> dict | None:
        recall = getattr(self, "_recall", None)  # the meter may ask during __init__
        return recall.message if recall is not None else None

    def _recall_clear(self) -> None:
        """Take last turn's recalled message out before anything measures or plans: it is
        replaced each turn, never accumulated, summarized or archived."""
        try:
            kept = self._recall.clear(self._context.messages)  # type: ignore[union-attr]
            if kept is not None:
                self._set_messages(kept)
        except Exception as e:  # recall never costs the turn
            logger.error(f"{self}: recall clear failed ({type(e).__name__})")

    async def _recall_turn(self) -> None:
        """Place this turn's recalled message, if the archive answers within the budget."""
        recall = self._recall
        if recall is None or not recall.params.enabled or self._step_failures.disabled:
            return
        try:
            placed = await recall.prepare(
                lambda: self._context.messages,
                lambda: [self._summary_text or "", *(f.text for f in self._pinned.facts)],
            )
            if placed is not None:
                self._set_messages(placed)
        except Exception as e:  # recall never costs the turn
            recall.message = None
            logger.error(f"{self}: recall failed ({type(e).__name__}); the turn goes without")

    # -- durable memory (store) hooks: nothing here runs without a store --------------------

    @property
    def call_id(self) -> str | None:
        """This call's id in the store (``None`` without a store)."""
        return self._recorder.call_id if self._recorder is not None else None

    async def _store_turn(self) -> None:
        """Count the turn; on the first one, give a returning caller their memory."""
        recorder = self._recorder
        recorder.turns += 1
        if recorder.turns == 1:
            memory = await recorder.memory_for_first_turn()
            if memory is not None:
                self._restore_memory(*memory)

    def _restore_memory(self, facts: list[dict], earlier: str | None) -> None:
        """Pin a returning caller's facts and place the "earlier calls" text where the
        summary goes (user-role data, like any summary), so this call's summaries build on
        it."""
        self._recorder.restoring(True)
        try:
            for f in facts:
                try:
                    self._pinned.pin(
                        f["key"], f["text"], kind=f.get("kind", "fact"), source=f["source"]
                    )
                except (KeyError, ValueError, TypeError):
                    continue  # a malformed stored fact is skipped, never the call
            self._enforce_pinned_budget()
            self._sync_pinned()
        finally:
            self._recorder.restoring(False)
        if (
            earlier
            and not self.summary_in_flight
            and not self._summary_present(self._context.messages)
        ):
            message = self._summary_for(earlier, self._summary_config)
            messages = self._context.messages
            at = head_length(messages)
            self._summary_message, self._summary_text = message, earlier
            self._summary_tokens = count_text(self._meter.counter, earlier)
            self._set_messages([*messages[:at], message, *messages[at:]])

    async def _store_end(self, ended_by: str) -> None:
        """Record the final state and flush the queue (bounded by ``flush_timeout_s``)."""
        await self._recorder.end(
            ended_by=ended_by,
            summary=self.summary_text,
            facts=self._pinned.facts,
            messages_in_context=len(self._context.messages),
            compactions=self._compactions,
        )

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        self._manual_waiting = False
        if task is not None and not task.done():
            await self.cancel_task(task)
