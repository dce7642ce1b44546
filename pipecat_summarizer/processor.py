"""``ContextSummarizer``: the Pipecat shell around the pure core.

It watches frames, asks the trigger when to compact (``policy.CompactionTrigger``), asks the
planner what (``plan``), runs one background summary at a time, and applies the result with
a synchronous, identity-checked splice of the shared context. What the model sees besides
the verbatim turns (pinned facts, the rolling summary) is the memory record's
(``memory.ConversationMemory``): this shell only puts the messages it renders in place.
Frames are never held: every frame is pushed on unchanged, except the manual
``LLMSummarizeContextFrame``, which this processor consumes.

A summary's way from the secondary LLM to the context: the backend returns it
(``summarizers/``, as it came), :func:`~pipecat_summarizer.summarizers.base.as_result`
cleans it (the one place: stripped, a fence around it removed, an empty one a failure),
:meth:`ContextSummarizer._apply` checks the planned messages are still in place
(``plan.locate``), the memory takes it in (:meth:`ConversationMemory.absorb`: facts pinned,
folded facts written in, message rendered), ``plan.splice`` puts the message in, and the
memory adopts it (:meth:`ConversationMemory.commit`) and re-renders the fact messages.

Why over 600 lines (about 1,050): this is the public class's home (about 190 lines of its
docstrings) and the one place every asyncio and Pipecat concern meets: frames, the
background task, events, the store and recall hooks, and the context writes the ceiling
asks for (the ceiling itself, its eviction step, memo, event and request overhead, is
``ceiling.RequestCeiling``). Rules live in pure modules.
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

from pipecat_summarizer._compaction.cadence import (
    ANSWERED_REASONS,
    AnswerWait,
    ResponseEvent,
    kept_messages,
    offers_tools,
)
from pipecat_summarizer._compaction.ceiling import RequestCeiling, hook_request_reads
from pipecat_summarizer._compaction.measure import ContextMeter, Measurement
from pipecat_summarizer._compaction.plan import (
    Plan,
    blocked_reason,
    head_length,
    locate,
    make_protection,
    pending_places,
    select,
    splice,
    split_pending,
    with_pending,
)
from pipecat_summarizer._compaction.prompt import SummaryRequest, build_request
from pipecat_summarizer._compaction.trigger import (
    CompactionTrigger,
    StepFailures,
    effective_timeout,
    validate_config,
    validate_summary_config,
)
from pipecat_summarizer._recall.rules import RecallParams
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._record.pinned import Fact
from pipecat_summarizer._record.record import ConversationMemory
from pipecat_summarizer._session.recorder import CallRecorder, MemoryOptions
from pipecat_summarizer._text.tokens import (
    EstimateTokenCounter,
    TokenCounter,
    as_token_counter,
    count_text,
)
from pipecat_summarizer.events import (
    ContextCompactedEvent,
    ContextCompactedFrame,
    MessagesEvictedEvent,
    Reason,
    SummaryFailedEvent,
    short_sha256,
)
from pipecat_summarizer.guard import LLMRequestGuard
from pipecat_summarizer.params import ContextSummarizerParams, as_params
from pipecat_summarizer.params import SummarizerOptions as SummarizerOptions  # 0.1 import
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.summarizers.base import (
    Summarizer,
    SummaryResult,
    as_result,
    attach_summarizer,
    describe_error,
    detach_summarizer,
    is_async_summarizer,
)
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer


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


def _holds(messages: list, message: Any) -> bool:
    """Whether ``message`` (by identity) is in ``messages``: the processor's own messages sit
    near the start (facts, summary) or the end (the recalled block), so this is cheap."""
    for m in messages[:8]:
        if m is message:
            return True
    return any(m is message for m in reversed(messages))


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


@dataclass
class _Job:
    plan: Plan
    request: SummaryRequest
    reason: Reason
    config: LLMContextSummaryConfig
    summarizer: Summarizer
    started: float


class _EvictionHost:
    """The processor's side of the ceiling (``ceiling.CeilingHost``): the ceiling decides
    what leaves; the pending queue, the memory's facts and the context writes stay here."""

    def __init__(self, processor: ContextSummarizer):
        self._p = processor

    def ceiling_messages(self) -> list:
        return self._p._context.messages

    def ceiling_view(self) -> list:
        return self._p._view(self._p._context.messages)

    def ceiling_fixed_tokens(self) -> int:
        noted = self._p._memory.noted_message  # never evicted, sent with every request
        return self._p._meter.counter.count_message(noted) if noted is not None else 0

    def ceiling_summary_message(self) -> dict | None:
        return self._p._memory.summary_message

    def ceiling_move_out(self, view: list, remaining: list, out: list) -> None:
        p, memory = self._p, self._p._memory
        # the queue stays in conversation order, with position keys: eviction may have
        # stepped over an unresolved tool call
        summary = memory.summary_message
        logical = with_pending(view, p._pending, summary, p._pending_places)
        queued = {id(m) for m in (*p._pending, *out)}
        p._set_messages(remaining)
        p._pending = [m for m in logical if id(m) in queued]
        p._pending_places = pending_places(logical, p._pending, summary)
        if p._params.pinning.from_evicted:
            p._put(memory.pin_evicted(p._context.messages, out, in_flight=p.summary_in_flight))
        if p._recorder is not None:
            p._recorder.archive(out, "evicted")

    def ceiling_total_tokens(self) -> int:
        p = self._p
        return p._meter.measure(p._context.messages, p._memory.summary_message).total_tokens

    def ceiling_pending(self) -> int:
        return len(self._p._pending)


class ContextSummarizer(FrameProcessor):
    """Summarizes older turns of the shared context in the background.

    Place it between the user aggregator and the main LLM. On each user-turn
    ``LLMContextFrame`` it checks Pipecat's thresholds; when one trips it starts one
    background summary of the oldest turns on a secondary LLM, and when the summary is back
    it splices it into the shared context (only if the summarized messages are still in
    place), keeping recent turns and anything added meanwhile verbatim.

    Event handlers:
        on_summary_applied(processor, ContextCompactedEvent)
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
        params: Parameters beyond Pipecat's config, grouped by feature (trigger, retry,
            pinning, ceiling); safe defaults.
        options: Deprecated flat form of ``params`` (``SummarizerOptions``); warns.
        llm: The main LLM service, so the ceiling (``max_request_tokens``) also counts its
            ``system_instruction`` (with the instructions Pipecat appends to it) and the
            tool schemas it sends. Not needed when the guard from :meth:`after_llm` sits
            right after the LLM: it attaches the LLM at start.
        store: A :class:`~pipecat_summarizer.store.MemoryStore` (``SQLiteMemoryStore``,
            ``PostgresMemoryStore``) that records every compaction, every message that
            leaves the context, the pinned facts' history and the call's final state, off
            the hot path; and gives a returning caller's call their memory. ``None`` (the
            default): nothing is recorded, behaviour as without it.
        call_id: This call's id in the store (a random one if not given). Needs ``store``.
        user_id: The caller's id: their earlier calls' memory loads in the background from
            the start and joins the context at the first turn after it has arrived (no
            frame waits for it). Needs ``store``.
        memory: How the store is used (resume on/off, budgets, timeouts, queue).
        recall: Bring archived details back: on each user turn, the store's best matches
            for the latest user message that are not in view go in one bounded
            user-role "recalled from earlier" message before it (see
            :class:`~pipecat_summarizer._recall.rules.RecallParams`). Needs ``store``. The block
            counts toward ``max_request_tokens``: it shrinks to the room the conversation
            leaves and gives way before any conversation is evicted.
        **kwargs: Passed to ``FrameProcessor``.

    Raises:
        ValueError: If no summarizer is configured, or the kept messages alone would reach the
            message threshold (``min_messages_after_summary >= max_unsummarized_messages``).
            A threshold at most two above the kept messages is accepted and compacts on
            every turn, as Pipecat's built-in does with it.
    """

    def __init__(
        self,
        *,
        context: LLMContext,
        config: LLMAutoContextSummarizationConfig | Any = None,
        summarizer: Summarizer | LLMService | None = None,
        params: ContextSummarizerParams | None = None,
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
        self._params = as_params(params, options)
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
        # this processor uses the summarizer from its start to its end (a shared one closes
        # what it opened itself when the last processor using it ends)
        self._attached = False
        p = self._params
        self._protected = make_protection(protect_injected_system=p.protect_injected_system)
        counter: TokenCounter = as_token_counter(p.token_counter or EstimateTokenCounter())
        self._memory = ConversationMemory(
            self._config.summary_config,
            p.pinning,
            summary_role=p.summary_role,
            count_text=lambda text: count_text(self._meter.counter, text),
            log_content=p.log_content,
            name=str(self),
        )
        self._meter = ContextMeter(
            counter,
            # the conversation-facts message is never summarized, like the head
            lambda i, m, ms: (
                m is self._memory.noted_message
                or m is self._memory.app_message
                or m is self._recalled()
                or self._protected(i, m, ms)
            ),
        )
        self._trigger = CompactionTrigger(self._config, p.trigger, p.retry)
        # a compaction due on a request waits for the response's end (the companion reports
        # it): then the answer's shape is known, a tool round's call and result included
        self._answer_wait = AnswerWait()
        self._waiting: Measurement | None = None  # the request's measurement, while waiting
        self._waiting_after = 0  # compactions applied when the wait began
        # End/Cancel passed: the companion may still report the last response or a
        # follow-up, which must not start a compaction on a call that is over
        self._ended = False
        self._ceiling = RequestCeiling(
            p.ceiling,
            self._meter.counter,
            protect_injected_system=p.protect_injected_system,
            stale_after=p.unresolved_tool_call_turns,
            name=str(self),
        )
        self._evictions = _EvictionHost(self)
        if llm is not None:
            self.attach_llm(llm)
        self._pending: list = []  # evicted under the ceiling, in conversation order
        # where each pending message sits (eviction may step over an unresolved tool call)
        self._pending_places: dict = {}
        self._task: asyncio.Task | None = None
        self._manual_waiting = False
        self._manual_pending: LLMContextSummaryConfig | None = None
        self._serializing = False  # the ceiling's check as the LLM builds a request runs
        hook_request_reads(self._context, self._prepare_at_serialization)
        # the processor's own per-frame work: which step runs, and its failures in a row
        self._step = "counting"
        self._step_failures = StepFailures(_STEP_FAILURE_LIMIT)
        self._blocked: str | None = None  # why the last due compaction could not start
        self._warned_blocked: set[str] = set()
        self._compactions = 0
        self._register_event_handler("on_summary_applied")
        self._register_event_handler("on_summary_failed")
        self._register_event_handler("on_messages_evicted")
        # durable memory: one more sink for the same moments (see the store hooks below)
        if store is None:
            for name, value in (("memory", memory), ("user_id", user_id), ("call_id", call_id)):
                if value is not None:  # silently ignored, it would record nothing
                    raise ValueError(f"{name} needs a store (store=SQLiteMemoryStore(...))")
        self._recorder = (
            CallRecorder(store, call_id, user_id, memory) if store is not None else None
        )
        if self._recorder is not None:
            self._memory.on_facts_changed = self._recorder.facts_changed
        # recall: archived details back in view (see the recall hooks below)
        self._recall: RecallStep | None = None
        if recall is not None:
            if not isinstance(recall, RecallParams):
                raise TypeError(f"recall must be a RecallParams, got {type(recall).__name__}")
            if store is None or self._recorder is None:
                raise ValueError("recall needs a store (store=SQLiteMemoryStore(...))")
            self._recall = RecallStep(
                store,
                recall,
                call_id=self._recorder.session_id,  # the store key of this session
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
        return self._memory.summary_text if self._summary_in_context() else None

    @property
    def pinned_facts(self) -> list[Fact]:
        """The pinned facts, in the order they are rendered."""
        return self._memory.facts.facts

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
        self._ceiling.attach_llm(llm)

    def request_overhead_tokens(self) -> int:
        """Tokens every request carries besides the messages: the main LLM's
        ``system_instruction`` (when the LLM is known) and the context's tool schemas."""
        return self._ceiling.overhead(self._context.tools)

    @property
    def context(self) -> LLMContext:
        """The shared context this processor compacts."""
        return self._context

    @property
    def llm(self) -> LLMService | None:
        """The main LLM whose ``system_instruction`` and tools the ceiling counts, if known."""
        return self._ceiling.llm

    def watch_responses(self) -> None:
        """Start a due compaction when the main LLM's response ends, not on its request.

        Called by :class:`LLMRequestGuard` at start when it sits right after the LLM: it then
        reports every response (:meth:`llm_response`). A plan made on the request counts the
        answer as one kept message; when the answer is a tool round (a call, its result,
        then the answer), the call and the result would stay on top of the tail it counted.
        Waiting for the response's end, the follow-up request after tool calls decides again
        with both in the context (:class:`~pipecat_summarizer._compaction.cadence.AnswerWait`). Only
        when the answer may be a tool round: the context offers tools, or the LLM has called
        one in this call.
        """
        self._answer_wait.enabled = True

    async def llm_response(self, event: ResponseEvent) -> None:
        """The companion reports the main LLM's response as it passes (see
        :meth:`watch_responses`): ``"text"``, ``"tool_call"``, and ``"end"``, reported
        before the answer reaches the context. Never raises."""
        wait = self._answer_wait
        if self._ended:
            return
        if event == "text":
            wait.text()
        elif event == "tool_call":
            wait.tool_call()
        elif event == "end" and wait.reason is not None:
            await self._guarded(self._on_response_end)

    async def prepare_request(self) -> None:
        """Make the context ready for a request this processor did not see go by: pinned
        facts in place, under ``max_request_tokens``, and a compaction started if a
        threshold trips (Pipecat's built-in checks as every response starts, tool
        follow-ups included). Called by :class:`LLMRequestGuard` for the follow-up after a
        tool call. Never raises: a failure is logged and the request goes out as it is."""
        if self._ended:
            return
        await self._guarded(self._on_follow_up)

    def request_manual_summary(self, config: LLMContextSummaryConfig | None = None) -> None:
        """Start a manual summary (queued behind one in flight), as
        ``LLMSummarizeContextFrame(config=...)`` does.

        Args:
            config: A config override, honoured fully; ``None`` for the processor's own.
        """
        self._start_manual(config)

    @property
    def memory(self) -> ConversationMemory:
        """The memory record (pinned facts, rolling summary) this processor puts in place."""
        return self._memory

    def pin(self, key: str, text: str, *, kind: str = "fact", source: str = "app") -> None:
        """Pin a fact under ``key`` (replacing any fact with that key) in every request.

        Args:
            key: The fact's key, for example ``"allergy"``.
            text: The fact, for example ``"allergic to peanuts"``.
            kind: ``"fact"`` or ``"constraint"``.
            source: Who pins it. ``"app"`` (the default) is the application: only these facts
                are rendered with authority (in a ``pinning.app_role`` message) and they are
                the last to leave when the facts are over budget. ``"llm"`` (the
                ``remember_fact`` tool) and ``"summary"`` are conversation facts, rendered
                as quoted data in a user-role message.

        Raises:
            ValueError: If the key or text is empty, or the kind or source unknown.
        """
        self._reclaim_own()
        self._put(
            self._memory.pin(
                self._context.messages,
                key,
                text,
                kind=kind,
                source=source,
                in_flight=self.summary_in_flight,
            )
        )

    def unpin(self, key: str) -> bool:
        """Remove the pinned fact under ``key``.

        Returns:
            True if a fact was removed.
        """
        self._reclaim_own()
        removed, new = self._memory.unpin(
            self._context.messages, key, in_flight=self.summary_in_flight
        )
        self._put(new)
        return removed

    def _put(self, messages: list | None) -> None:
        """Put what the memory rendered in place (``None``: nothing changed)."""
        if messages is not None:
            self._set_messages(messages)

    def _set_messages(self, messages: list) -> None:
        # A replacement by the application is judged on the context as this write found
        # it: after the write, the processor's own messages (facts, summary) would be in
        # the new context and the meter would take the rewrite for ours.
        noted, app = self._memory.noted_message, self._memory.app_message
        if self._check_replaced():
            # computed before the replacement was known: the facts messages rendered then
            # may quote the old conversation's evicted messages, now unpinned
            stale = [
                x
                for x in (noted, app)
                if x is not None
                and x is not self._memory.noted_message
                and x is not self._memory.app_message
            ]
            messages = [m for m in messages if all(m is not x for x in stale)]
            messages = self._memory.render(messages) or messages
        self._write(messages)

    def _write(self, messages: list) -> None:
        # every rewrite keeps the conversation-facts message right after the head; the
        # meter's cheap append check cannot see a rewrite that keeps the length
        self._context.set_messages(self._memory.place(messages))
        self._meter.invalidate()
        # measured now, so the meter's anchors are this write's and a later replacement
        # is compared with what this processor left, never taken for its own rewrite
        self._meter.measure(self._context.messages, self._memory.summary_message)

    def _view(self, messages: list) -> list:
        """The context as the plan functions see it: without the conversation-facts message,
        which is neither head nor conversation (never summarized, never evicted), nor the
        recalled message (this turn's only: never summarized, evicted or archived)."""
        view, recalled = self._memory.view(messages), self._recalled()
        return view if recalled is None else [m for m in view if m is not recalled]

    def _summary_in_context(self) -> dict | None:
        return self._memory.summary_in(self._context.messages)

    def _render_memory(self) -> None:
        """The pinned facts in place, rewritten only on change (cheap when nothing did);
        the conversation's facts go into the summary message unless a summary is in flight."""
        in_flight = self.summary_in_flight
        self._put(self._memory.render(self._context.messages, in_flight=in_flight))

    def _fold_and_refresh(self) -> None:
        """Facts over budget fold into the summary; the summary message is re-rendered."""
        in_flight = self.summary_in_flight
        self._put(self._memory.enforce_budget(self._context.messages, in_flight=in_flight))
        self._put(self._memory.refresh_summary(self._context.messages, in_flight=in_flight))

    # -- frames ---------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Watch context frames, start summaries, and push every frame on.

        Args:
            frame: The frame.
            direction: Its direction.
        """
        await super().process_frame(frame, direction)

        if isinstance(frame, StartFrame):
            self._attach()
            if self._recorder is not None:
                self._recorder.start()  # the writer's task, and the caller's memory loading
                if self._recall is not None:
                    self._recall.start()
        if isinstance(frame, LLMSummarizeContextFrame):
            # Ours to handle; the built-in summarizer downstream must not run it too.
            await self._guarded(self._start_manual, frame.config)
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            self._end_waits()
            await self._cancel_task()
            await self._close_recall()
            if self._recorder is not None:
                await self._store_end("end" if isinstance(frame, EndFrame) else "cancel")
            await self._close_owned()
        elif (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.DOWNSTREAM
            and not frame.speculation
            and frame.context is self._context
        ):
            arrived = _clock()  # the recall budget bounds the frame's whole time here
            if self._recall is not None:
                self._recall_clear()
            await self._guarded(self._on_context_frame)
            if self._recall is not None:
                await self._recall_turn(arrived)
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
        if self._params.log_content:
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
        self._end_waits()
        await self._cancel_task()
        await self._close_recall()
        if self._recorder is not None:
            await self._store_end("cleanup")
        await self._close_owned()
        await super().cleanup()

    # -- the per-turn hot path --------------------------------------------------------------

    async def _on_context_frame(self) -> None:
        self._reclaim_own()
        self._store_turn()
        self._plan_if_due(await self._prepare_request())

    async def _on_follow_up(self) -> None:
        # A tool follow-up is a request too: a threshold crossed within a tool round
        # compacts now, not a turn later (the message count grew by the call and result).
        self._plan_if_due(await self._prepare_request())

    def _plan_if_due(self, m: Measurement) -> None:
        """Start a compaction if the trigger says one is due for this request (or, with the
        companion reporting responses, once the response has ended)."""
        self._step = "planning"
        reason = self._trigger.due(
            m,
            now=_clock(),
            in_flight=self.summary_in_flight,
            pending=bool(self._pending),
            answer_pending=True,  # every caller prepares a request the LLM will answer
        )
        reason = self._answer_wait.request(reason, tools_offered=offers_tools(self._context.tools))
        self._waiting = m if self._answer_wait.reason is not None else None
        self._waiting_after = self._compactions
        if reason is not None:
            self._start_due(reason, m, answer_pending=reason in ANSWERED_REASONS)

    def _on_response_end(self) -> None:
        """The response to a request a compaction waited on has ended: start it now, unless
        the response called tools (the follow-up request decides again)."""
        self._step = "planning"
        reason, m = self._answer_wait.ended(), self._waiting
        self._waiting = None
        if reason is None or m is None or self.summary_in_flight:
            return
        if self._compactions != self._waiting_after:
            return  # a summary (a manual one) landed meanwhile: the next request decides
        if self._check_replaced():
            return  # a new conversation: planned afresh on its next request
        self._start_due(reason, m, answer_pending=self._answer_wait.answered)

    def _start_due(self, reason: Reason, m: Measurement, *, answer_pending: bool) -> None:
        """Start a due automatic compaction; remember when there is nothing to plan."""
        config = self._config.summary_config
        if not self._start(reason, config, self._summarizer, answer_pending=answer_pending):
            self._trigger.nothing_to_plan(m)
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

    def _reclaim_own(self) -> None:
        """Take back this processor's own messages (facts, summary, recalled block) that the
        application put back as copies (a deep-copied ``LLMMessagesUpdateFrame``, a restored
        state): equal role and content where the original is gone. Recognised by identity
        otherwise, a copy would stay as conversation (an unpinned application fact kept in
        the head, the recalled block sent and archived as the caller's words every turn).
        Cheap when nothing was copied: identity checks only."""
        messages: list[Any] = self._context.messages
        recall = self._recall
        own = self._memory.own_messages()
        if recall is not None and recall.message is not None:
            own.append(recall.message)
        missing = [x for x in own if not _holds(messages, x)]
        if not missing:
            return
        taken = {id(x) for x in own}
        for old in missing:
            copy = next((m for m in messages if id(m) not in taken and m == old), None)
            if copy is None:
                continue  # it left the context
            taken.add(id(copy))
            if recall is not None and old is recall.message:
                recall.message = copy
            else:
                self._memory.reclaim(old, copy)

    def _check_replaced(self, m: Measurement | None = None) -> bool:
        """Archive what the application removed from the context (``"replaced"``), and
        drop the pending queue once it cut the conversation's start (a replacement, a Flows
        reset, a truncating update): the queue is older than everything it dropped and must
        not be summarized into what it kept.

        Returns:
            True if the context was found replaced (once per replacement).
        """
        if m is None:
            self._reclaim_own()  # before the meter takes a copy of ours for conversation
            self._meter.measure(self._context.messages, self._memory.summary_message)
        rewrite = self._meter.take_rewrite()
        if rewrite is None:
            return False
        if self._recorder is not None:  # only conversation messages: never the processor's own
            self._recorder.archive(rewrite.removed, "replaced")
        logger.info(
            f"{self}: the application removed {len(rewrite.removed)} messages from the "
            f"context{' (a replacement)' if rewrite.replaced else ''}"
        )
        if not rewrite.replaced:
            return False
        self._trigger.context_replaced()  # a new conversation: plan it afresh
        self._warned_blocked.clear()
        if self._pending:
            dropped, self._pending = self._pending, []
            self._pending_places = {}
            self._pending_discarded(dropped, "the context was replaced")
        # facts pinned from the old conversation's evicted messages go with it (the
        # application's facts and the summaries' stay)
        rendered = self._memory.forget_evicted(self._context.messages)
        if rendered is not None:
            self._write(rendered)
        return True

    async def _prepare_request(self) -> Measurement:
        """Make the context ready to be sent: pinned facts in place, under the ceiling.

        Runs for every request the main LLM receives: the user turns this processor sees,
        and (through :class:`LLMRequestGuard`) the follow-ups after tool calls.
        """
        m, event = self._prepare_now()
        if event is not None:
            await self._call_event_handler("on_messages_evicted", event)
        return m

    def _prepare_now(self) -> tuple[Measurement, MessagesEvictedEvent | None]:
        """:meth:`_prepare_request`'s synchronous work: the measurement, and the eviction
        event to report, if any."""
        event = None
        self._step = "counting"
        self._check_replaced()  # before anything is written (see _set_messages)
        if self._recall is not None and self._recall.forgotten():
            self._recall_gives_way()  # it quotes what the caller's forget removed
        self._step = "pinning"
        self._render_memory()
        self._step = "counting"
        m = self._meter.measure(self._context.messages, self._memory.summary_message)
        self._check_replaced(m)
        ceiling = self._ceiling
        if ceiling.params is None:
            return m, None
        overhead = self.request_overhead_tokens()
        if ceiling.due(m.total_tokens, overhead, self._context.messages) and (
            self._recall_gives_way()
        ):
            m = self._meter.measure(self._context.messages, self._memory.summary_message)
        if ceiling.due(m.total_tokens, overhead, self._context.messages):
            self._step = "eviction"
            event = ceiling.evict(self._evictions, overhead)
            m = self._meter.measure(self._context.messages, self._memory.summary_message)
        return m, event

    def _prepare_at_serialization(self) -> None:
        """Hold the ceiling where the request is built (see
        ``ceiling.hook_request_reads``): messages the aggregators
        appended after the frame passed this processor are counted too."""
        if self._params.ceiling is None or self._step_failures.disabled or self._serializing:
            return
        self._serializing = True
        try:
            _, event = self._prepare_now()
        except Exception as e:  # the request goes out as it is rather than not at all
            logger.error(
                f"{self}: holding the ceiling as the request was built failed "
                f"({type(e).__name__}); sent as it is"
            )
            return
        finally:
            self._serializing = False
        if event is not None:
            # the event's handlers are async: reported right after the request is built
            self.create_task(
                self._call_event_handler("on_messages_evicted", event), f"{self}::evicted"
            )

    # -- starting a summary -----------------------------------------------------------------

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

    def _start(
        self,
        reason: Reason,
        config: LLMContextSummaryConfig,
        summarizer: Summarizer,
        *,
        answer_pending: bool = False,
    ) -> bool:
        self._step = "planning"
        self._blocked = None
        self._check_replaced()  # a replaced context's pending messages are never planned
        summary_message = self._summary_in_context()
        messages = with_pending(
            self._view(self._context.messages), self._pending, summary_message, self._pending_places
        )
        counter = self._meter.counter
        previous = self._memory.summary_text if summary_message is not None else None
        previous_tokens = self._memory.summary_tokens if previous else 0
        budget = self._params.max_summary_input_tokens
        # a request's plan precedes its answer, which lands before the summary: it is kept
        keep = kept_messages(config.min_messages_after_summary, answer_pending=answer_pending)
        plan = select(
            messages,
            keep=keep,
            counter=counter,
            summary_message=summary_message,
            previous_summary_tokens=previous_tokens,
            input_budget=budget,
            protect_injected_system=self._params.protect_injected_system,
            stale_after=self._params.unresolved_tool_call_turns,
        )
        if plan is None:
            self._blocked = blocked_reason(
                messages,
                keep=keep,
                summary_message=summary_message,
                protect_injected_system=self._params.protect_injected_system,
                stale_after=self._params.unresolved_tool_call_turns,
            )
            return False
        gain = plan.input_tokens - previous_tokens
        if not self._trigger.worth_it(reason, gain, self._reducible_tokens):
            logger.debug(f"{self}: token threshold tripped, but only {gain} tokens to gain")
            self._blocked = "too little to summarize outside the kept recent messages"
            return False
        self._step = "rendering"
        shorten_to = 2000
        if plan.shortened and budget:
            shorten_to = max(200, budget * 4 // (2 * len(plan.shortened)))
        request = build_request(
            plan.summarized,
            previous_summary=previous,
            max_tokens=self._trigger.output_budget(config),
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

    def _reducible_tokens(self) -> int:
        return self._meter.measure(
            self._context.messages, self._memory.summary_message
        ).reducible_tokens

    # -- running --------------------------------------------------------------------------

    async def _run(self, job: _Job) -> None:
        timeout = effective_timeout(job.config)
        try:
            try:
                result = as_result(
                    await asyncio.wait_for(job.summarizer.summarize(job.request), timeout)
                )
            except TimeoutError:
                await self._failed(job, f"summarizer timed out after {timeout:g}s")
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
        self._fold_and_refresh()  # what was deferred while the summary ran
        self._render_memory()
        if self._manual_waiting:
            override, self._manual_pending, self._manual_waiting = self._manual_pending, None, False
            self._start_manual(override)
        elif self._trigger.chain_backlog(pending=bool(self._pending), now=_clock()):
            self._start("backlog", self._config.summary_config, self._summarizer)

    def _log_error_content(self, error: BaseException) -> None:
        if self._params.log_content:
            logger.opt(exception=error).debug(f"{self}: summary error detail: {error!r}")

    def _end_waits(self) -> None:
        """The call is over: a compaction waiting for a response's end never starts."""
        self._ended = True
        self._answer_wait.reason = None
        self._waiting = None

    async def _close_recall(self) -> None:
        # a search or semantic indexing still running has no turn left to serve
        if self._recall is None:
            return
        try:
            await self._recall.close()
        except Exception as e:  # closing must never break End/Cancel
            logger.warning(f"{self}: closing recall failed ({type(e).__name__})")

    def _attach(self) -> None:
        if self._attached or self._ended:
            return
        self._attached = True
        try:
            attach_summarizer(self._summarizer)
        except Exception as e:  # the call goes on; its summaries may fail later
            logger.warning(f"{self}: attaching the summarizer failed ({type(e).__name__})")

    async def _close_owned(self) -> None:
        if self._attached:  # once, at the first of End, Cancel and cleanup
            self._attached = False
            await detach_summarizer(self._summarizer)
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
        delay, escalate = self._trigger.summary_failed(_clock())
        n = self._trigger.failures.consecutive
        logger.warning(
            f"{self}: summary failed ({error}); context left untouched, "
            f"failure {n} in a row, next automatic attempt in {delay:.1f}s"
        )
        if escalate:
            logger.error(
                f"{self}: context summarization has failed {n} time{'' if n == 1 else 's'} "
                "in a row; the context keeps growing until the summarizer recovers"
            )
        if self._recorder is not None:
            self._recorder.failed(
                job.reason, error, _clock() - job.started, getattr(job.summarizer, "model", None)
            )
        await self._call_event_handler(
            "on_summary_failed", SummaryFailedEvent(error, n, job.reason, delay)
        )

    async def _apply(self, job: _Job, result: SummaryResult) -> None:
        self._check_replaced()  # a replaced context's pending messages are not spliced in
        messages = self._context.messages
        memory = self._memory
        logical = with_pending(
            self._view(messages), self._pending, memory.summary_in(messages), self._pending_places
        )
        # Check before touching anything; everything below up to set_messages is synchronous.
        start = locate(logical, job.plan)
        if start is None:
            logger.warning(
                f"{self}: context changed while summarizing (the summarized messages are no "
                "longer in place); summary discarded, nothing applied"
            )
            return
        self._trigger.summary_applied()
        draft = memory.absorb(result.text, result.sections, job.config)
        new_logical = splice(logical, job.plan, draft.message, start)
        assert new_logical is not None  # located above, and nothing ran in between
        before = self._meter.measure(messages, memory.summary_message)
        kept = len(logical) - start - len(job.plan.replaced)
        new_messages, self._pending = split_pending(new_logical, self._pending)
        self._pending_places = pending_places(new_logical, self._pending, draft.message)
        self._set_messages(new_messages)
        # summarized messages leave the token cache, so it does not keep them alive
        self._meter.counter.forget_except([*new_messages, *self._pending])
        memory.commit(draft)
        self._warned_blocked.clear()
        self._render_memory()
        after = self._meter.measure(self._context.messages, draft.message)
        self._compactions += 1
        event = ContextCompactedEvent(
            reason=job.reason,
            messages_before=before.message_count,
            messages_after=after.message_count,
            messages_summarized=len(job.plan.summarized),
            messages_kept=kept,
            tokens_before=before.total_tokens,
            tokens_after=after.total_tokens,
            summary_tokens=self._meter.counter.count_message(draft.message),
            input_tokens=job.plan.input_tokens
            + count_text(self._meter.counter, job.request.system_prompt),
            latency_s=_clock() - job.started,
            summary_sha256=short_sha256(draft.text),
            compaction=self._compactions,
            pending_messages=len(self._pending),
            pinned_facts=len(memory.facts),
        )
        logger.info(f"{self}: {event.log_line()}")
        if self._recorder is not None:
            model = getattr(job.summarizer, "model", None)
            self._recorder.applied(event, job.plan.summarized, draft.text, model)
        await self.push_frame(
            ContextCompactedFrame(message=draft.message, event=event),
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
        recall = self._recall
        assert recall is not None
        try:
            self._reclaim_own()  # a copy of last turn's block is still last turn's block
            kept = recall.without_message(self._context.messages)
            if kept is not None:
                # still known as ours while written: never taken for the application's removal
                self._set_messages(kept)
        except Exception as e:  # recall never costs the turn
            logger.error(f"{self}: recall clear failed ({type(e).__name__})")
        finally:
            recall.message = None

    def _recall_room(self) -> int | None:
        """What the ceiling leaves for the recalled block (it counts toward
        ``max_request_tokens``; ``None``: no ceiling)."""
        if self._params.ceiling is None:
            return None
        m = self._meter.measure(self._context.messages, self._memory.summary_message)
        return self._ceiling.room(m.total_tokens, self.request_overhead_tokens())

    def _recall_gives_way(self) -> bool:
        """Take the recalled block out (a request over the ceiling loses it before any
        conversation is evicted). Returns True if it was in the context."""
        recall = self._recall
        if recall is None or recall.message is None:
            return False
        kept = recall.without_message(self._context.messages)
        if kept is not None:
            self._set_messages(kept)
        recall.message = None
        return kept is not None

    async def _recall_turn(self, arrived: float | None = None) -> None:
        """Place this turn's recalled message, if the archive answers within the budget
        (counted from ``arrived``, when the frame reached the processor)."""
        recall = self._recall
        if recall is None or not recall.params.enabled or self._step_failures.disabled:
            return
        try:
            placed = await recall.prepare(
                lambda: self._context.messages,
                self._memory.texts_in_view,
                room=self._recall_room,
                started=arrived,
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

    def _store_turn(self) -> None:
        """Count the turn; give a returning caller their memory once it has loaded.

        Never waits for the store: a turn before the memory is there goes without it, and
        it joins the context at the first context frame after it arrives.
        """
        recorder = self._recorder
        if recorder is None:
            return
        recorder.turns += 1
        if not recorder.memory_pending:
            return
        memory = recorder.take_memory()
        if memory is None:
            return
        facts, earlier = memory
        recorder.restoring(True)  # fact changes are recorded as "restored"
        try:
            self._put(
                self._memory.load(
                    self._context.messages, facts, earlier, in_flight=self.summary_in_flight
                )
            )
        finally:
            recorder.restoring(False)

    async def _store_end(self, ended_by: str) -> None:
        """Record the final state and flush the queue (bounded by ``flush_timeout_s``)."""
        if self._recorder is None:
            return
        try:
            await self._recorder.end(
                ended_by=ended_by,
                summary=self.summary_text,
                facts=self._memory.facts.facts,
                messages_in_context=len(self._context.messages),
                compactions=self._compactions,
                in_context=self._conversation_at_end(),
            )
        except Exception as e:  # the end of the call must reach the rest of the pipeline
            logger.error(f"{self}: recording the end of the call failed ({type(e).__name__})")

    def _conversation_at_end(self) -> list:
        """The conversation messages still in the context at the end (archived then): not
        the head, the facts, the summary or the recalled message (the processor's own)."""
        view = self._view(self._context.messages)
        summary = self._memory.summary_message
        return [m for m in view[head_length(view) :] if m is not summary]

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        self._manual_waiting = False
        if task is not None and not task.done():
            await self.cancel_task(task)
