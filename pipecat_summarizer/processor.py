"""``ContextSummarizer``: the Pipecat shell around the context's owner.

It watches frames, runs one background summary at a time, emits the events, and awaits
the store and recall. Everything that reads or writes the shared context's messages (the
pending queue, the view, replaced-context detection, the recalled block's place, the
plan in flight, the ceiling's writes and the splice of a summary) is the synchronous
:class:`~pipecat_summarizer._session.owner.ContextSession`'s; this shell passes it the time
and whether a summary is in flight, and starts the jobs it returns. Frames are never held:
every frame is pushed on unchanged, except the manual ``LLMSummarizeContextFrame``, which
this processor consumes.
"""

from __future__ import annotations

import asyncio
import warnings
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

from pipecat_summarizer._compaction.cadence import ResponseEvent
from pipecat_summarizer._compaction.ceiling import hook_request_reads
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.trigger import StepFailures, effective_timeout, validate_config
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._record.pinned import Fact
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._session.owner import ContextSession
from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer._session.schedule import Job
from pipecat_summarizer._text.tokens import (
    CachedCounter,
    EstimateTokenCounter,
    as_token_counter,
    count_text,
)
from pipecat_summarizer.events import ContextCompactedFrame
from pipecat_summarizer.guard import LLMRequestGuard
from pipecat_summarizer.params import ContextSummarizerParams, MemoryParams, RecallParams, as_params
from pipecat_summarizer.params import SummarizerOptions as SummarizerOptions  # 0.1 import
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.summarizers.base import (
    Summarizer,
    as_result,
    attach_summarizer,
    describe_error,
    detach_summarizer,
    is_async_summarizer,
)
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer

# The compaction handler's name before 0.4; registering under it warns (one release).
_OLD_COMPACTED = "on_summary_applied"
_COMPACTED = "on_context_compacted"


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
    """The running loop's clock (``time.monotonic()`` on a standard loop): a simulated-time
    loop (the replay's) governs the retry backoff and latencies too."""
    return asyncio.get_running_loop().time()


class ContextSummarizer(FrameProcessor):
    """Summarizes older turns of the shared context in the background.

    Place it between the user aggregator and the main LLM. On each user-turn
    ``LLMContextFrame`` it checks Pipecat's thresholds; when one trips it starts one
    background summary of the oldest turns on a secondary LLM, and when the summary is back
    it splices it into the shared context (only if the summarized messages are still in
    place), keeping recent turns and anything added meanwhile verbatim.

    Event handlers:
        on_context_compacted(processor, ContextCompactedEvent) (``on_summary_applied``:
            deprecated name, warns)
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
        memory: MemoryParams | None = None,
        recall: RecallParams | None = None,
        **kwargs,
    ):
        """Initialize the processor.

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
            llm: The main LLM service, so the ceiling (``max_request_tokens``) also counts
                its ``system_instruction`` and tool schemas. Not needed when the guard from
                :meth:`after_llm` sits right after the LLM (it attaches the LLM at start).
            store: A :class:`~pipecat_summarizer.store.MemoryStore` that records every
                compaction, every message that leaves the context, the pinned facts'
                history and the call's final state, off the hot path; and gives a
                returning caller's call their memory. ``None``: nothing is recorded.
            call_id: This call's id in the store (a random one if not given). Needs ``store``.
            user_id: The caller's id: their earlier calls' memory loads in the background
                and joins the context at the first turn after it has arrived. Needs ``store``.
            memory: How the store is used (resume on/off, budgets, timeouts, queue).
            recall: Bring archived details back: on each user turn, the store's best matches
                for the latest user message that are not in view go in one bounded
                user-role "recalled from earlier" message before it (see
                :class:`~pipecat_summarizer._recall.rules.RecallParams`). Needs ``store``. It
                counts toward ``max_request_tokens`` and gives way before any eviction.
            **kwargs: Passed to ``FrameProcessor``.

        Raises:
            ValueError: If no summarizer is configured, or the kept messages alone would
                reach the message threshold (``min_messages_after_summary >=
                max_unsummarized_messages``); a store option without a store; recall
                without a store.
            TypeError: If ``context``, ``config`` or ``recall`` has the wrong type.
        """
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
        self._attached = False  # between start and end (a shared summarizer counts users)
        if store is None:
            for name, value in (("memory", memory), ("user_id", user_id), ("call_id", call_id)):
                if value is not None:  # silently ignored, it would record nothing
                    raise ValueError(f"{name} needs a store (store=SQLiteMemoryStore(...))")
        self._recorder = (
            CallRecorder(store, call_id, user_id, memory) if store is not None else None
        )
        counter = CachedCounter(
            as_token_counter(self._params.token_counter or EstimateTokenCounter())
        )
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
                count=lambda text: count_text(counter, text),
            )
        self._session = ContextSession(
            context,
            self._config,
            self._params,
            summarizer=self._summarizer,
            counter=counter,
            recorder=self._recorder,
            recall=self._recall,
            name=str(self),
        )
        if llm is not None:
            self.attach_llm(llm)
        self._task: asyncio.Task | None = None
        self._serializing = False  # the ceiling's check as the LLM builds a request runs
        hook_request_reads(context, self._prepare_at_serialization)
        self._step_failures = StepFailures(_STEP_FAILURE_LIMIT)
        self._register_event_handler(_COMPACTED)
        self._register_event_handler("on_summary_failed")
        self._register_event_handler("on_messages_evicted")

    # -- public surface -------------------------------------------------------------------

    def add_event_handler(self, event_name: str, handler):
        """Add an event handler (Pipecat's); ``on_summary_applied`` is the deprecated name
        of ``on_context_compacted``: it warns and the handler gets the same events."""
        if event_name == _OLD_COMPACTED:
            warnings.warn(
                f"{_OLD_COMPACTED} is deprecated, use {_COMPACTED}", DeprecationWarning, 2
            )
            event_name = _COMPACTED
        super().add_event_handler(event_name, handler)

    def remove_event_handler(self, event_name: str, handler):
        """Remove an event handler (Pipecat's); the deprecated name maps as when added."""
        super().remove_event_handler(
            _COMPACTED if event_name == _OLD_COMPACTED else event_name, handler
        )

    @property
    def config(self) -> LLMAutoContextSummarizationConfig:
        """The auto-summarization config in use."""
        return self._config

    @property
    def context(self) -> LLMContext:
        """The shared context this processor compacts."""
        return self._context

    @property
    def llm(self) -> LLMService | None:
        """The main LLM whose ``system_instruction`` and tools the ceiling counts, if known."""
        return self._session.ceiling.llm

    @property
    def summary_in_flight(self) -> bool:
        """True while a background summary is running."""
        return self._task is not None and not self._task.done()

    @property
    def summary_text(self) -> str | None:
        """The text of the summary currently in the context, if any."""
        return self._session.summary_text

    @property
    def pinned_facts(self) -> list[Fact]:
        """The pinned facts, in the order they are rendered."""
        return self._session.facts

    @property
    def pending_messages(self) -> list:
        """Messages evicted under the ceiling that still wait for a summary (a copy)."""
        return list(self._session.pending)

    @property
    def record(self) -> ConversationRecord:
        """The conversation record (pinned facts, rolling summary) this processor puts in place."""
        return self._session.record

    @property
    def memory(self) -> ConversationRecord:
        """Deprecated alias of :attr:`record` (warns)."""
        warnings.warn("ContextSummarizer.memory is deprecated, use .record", DeprecationWarning, 2)
        return self._session.record

    @property
    def recall_step(self) -> RecallStep | None:
        """The recall step (``None`` without ``recall=``): the ``recall_memory`` tool uses it."""
        return self._recall

    @property
    def call_id(self) -> str | None:
        """This call's id in the store (``None`` without a store)."""
        return self._recorder.call_id if self._recorder is not None else None

    def after_llm(self) -> LLMRequestGuard:
        """The companion processor to place right after the main LLM.

        Requests the processor cannot see otherwise pass through it: the follow-up after a
        tool call is held to ``max_request_tokens`` by the same eviction, and
        ``LLMSummarizeContextFrame`` queued by a function handler is summarized here on the
        secondary LLM instead of by Pipecat's built-in on the main LLM. It also lets the
        ceiling count the LLM's ``system_instruction`` and tool schemas. Example::

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
        self._session.ceiling.attach_llm(llm)

    def request_overhead_tokens(self) -> int:
        """Tokens every request carries besides the messages: the main LLM's
        ``system_instruction`` (when the LLM is known) and the context's tool schemas."""
        return self._session.request_overhead_tokens()

    def watch_responses(self) -> None:
        """Start a due compaction when the main LLM's response ends, not on its request.

        Called by :class:`LLMRequestGuard` at start when it sits right after the LLM (it then
        reports every response, :meth:`llm_response`): a plan made on a request that a tool
        round answers would keep the call and its result on top of the tail it counted
        (:class:`~pipecat_summarizer._compaction.cadence.AnswerWait`).
        """
        self._session.schedule.answer_wait.enabled = True

    async def llm_response(self, event: ResponseEvent) -> None:
        """The companion reports the main LLM's response as it passes (see
        :meth:`watch_responses`): ``"text"``, ``"tool_call"``, and ``"end"``, reported
        before the answer reaches the context. Never raises."""
        session = self._session
        if not session.schedule.ended and session.response(event):
            await self._guarded(
                lambda: session.response_ended(now=_clock(), in_flight=self.summary_in_flight)
            )

    async def prepare_request(self) -> None:
        """Make the context ready for a request this processor did not see go by (the
        follow-up after a tool call, from :class:`LLMRequestGuard`): pinned facts in place,
        under ``max_request_tokens``, a compaction started if a threshold trips. Never
        raises: a failure is logged and the request goes out as it is."""
        if not self._session.schedule.ended:
            await self._guarded(self._on_request)

    def request_manual_summary(self, config: LLMContextSummaryConfig | None = None) -> None:
        """Start a manual summary (queued behind one in flight), as
        ``LLMSummarizeContextFrame(config=...)`` does.

        Args:
            config: A config override, honoured fully; ``None`` for the processor's own.
        """
        self._start(self._manual(config))

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
        self._session.pin(key, text, kind=kind, source=source, in_flight=self.summary_in_flight)

    def unpin(self, key: str) -> bool:
        """Remove the pinned fact under ``key``.

        Returns:
            True if a fact was removed.
        """
        return self._session.unpin(key, in_flight=self.summary_in_flight)

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
            await self._guarded(lambda: self._start(self._manual(frame.config)))
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._end("end" if isinstance(frame, EndFrame) else "cancel")
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
        self._session.step = "counting"
        try:
            result = work(*args)
            if asyncio.iscoroutine(result):
                await result
            elif isinstance(result, Job):
                self._start(result)
        except Exception as e:
            await self._step_failed(self._session.step, e)
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
        await self._end("cleanup")
        await super().cleanup()

    async def _end(self, ended_by: str) -> None:
        self._session.schedule.end()
        await self._cancel_task()
        if self._recall is not None:
            try:  # a search or indexing still running has no turn left to serve
                await self._recall.close()
            except Exception as e:  # closing must never break End/Cancel
                logger.warning(f"{self}: closing recall failed ({type(e).__name__})")
        if self._recorder is not None:
            await self._store_end(ended_by)
        await self._close_owned()

    # -- the per-turn path ----------------------------------------------------------------

    async def _on_context_frame(self) -> None:
        self._session.reclaim_own()
        self._store_turn()
        await self._on_request()

    async def _on_request(self) -> None:
        # every request (a user turn, a tool follow-up) may start a due compaction now
        m = await self._prepare_request()
        in_flight = self.summary_in_flight
        self._start(self._session.request(m, now=_clock(), in_flight=in_flight))

    async def _prepare_request(self) -> Measurement:
        m, event = self._session.prepare(self.summary_in_flight)
        if event is not None:
            await self._call_event_handler("on_messages_evicted", event)
        return m

    def _prepare_at_serialization(self) -> None:
        """Hold the ceiling where the request is built (``ceiling.hook_request_reads``):
        messages the aggregators appended after the frame passed are counted too."""
        if self._params.ceiling is None or self._step_failures.disabled or self._serializing:
            return
        self._serializing = True
        try:
            _, event = self._session.prepare(self.summary_in_flight)
        except Exception as e:  # the request goes out as it is rather than not at all
            logger.error(
                f"{self}: holding the ceiling as the request was built failed "
                f"({type(e).__name__}); sent as it is"
            )
            return
        finally:
            self._serializing = False
        if event is not None:  # the handlers are async: reported right after the build
            self.create_task(
                self._call_event_handler("on_messages_evicted", event), f"{self}::evicted"
            )

    # -- a summary ------------------------------------------------------------------------

    def _manual(self, override: LLMContextSummaryConfig | None) -> Job | None:
        return self._session.manual(override, now=_clock(), in_flight=self.summary_in_flight)

    def _start(self, job: Job | None) -> None:
        if job is not None:
            self._task = self.create_task(self._run(job), f"{self}::summary")

    async def _run(self, job: Job) -> None:
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
                    applied = self._session.apply(job, result, now=_clock())
                    if applied is not None:
                        event, message = applied
                        await self.push_frame(
                            ContextCompactedFrame(message=message, event=event),
                            FrameDirection.UPSTREAM,
                        )
                        await self._call_event_handler(_COMPACTED, event)
                except Exception as e:  # a malformed result must not kill the processor
                    # no logger.exception: loguru's traceback shows local variables (messages)
                    logger.error(f"{self}: applying the summary failed ({type(e).__name__})")
                    self._log_error_content(e)
                    await self._failed(job, f"{type(e).__name__} while applying")
        finally:
            self._task = None
        # the same guard as a frame's work: an error here must not end the task unreported
        await self._guarded(lambda: self._session.after_run(now=_clock()))

    async def _failed(self, job: Job, error: str) -> None:
        event = self._session.failed(job, error, now=_clock())
        await self._call_event_handler("on_summary_failed", event)

    def _log_error_content(self, error: BaseException) -> None:
        if self._params.log_content:
            logger.opt(exception=error).debug(f"{self}: summary error detail: {error!r}")

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        self._session.cancelled()
        if task is not None and not task.done():
            await self.cancel_task(task)

    def _attach(self) -> None:
        if self._attached or self._session.schedule.ended:
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

    # -- recall: nothing here runs without recall=RecallParams(...) -----------------------

    def _recall_clear(self) -> None:
        try:
            self._session.clear_recalled()
        except Exception as e:  # recall never costs the turn
            logger.error(f"{self}: recall clear failed ({type(e).__name__})")

    async def _recall_turn(self, arrived: float) -> None:
        """Place this turn's recalled message, if the archive answers within the budget
        (counted from ``arrived``, when the frame reached the processor)."""
        recall, session = self._recall, self._session
        if recall is None or not recall.params.enabled or self._step_failures.disabled:
            return
        try:
            placed = await recall.prepare(
                lambda: session.messages,
                session.record.texts_in_view,
                room=session.recall_room,
                started=arrived,
            )
            session.place_recalled(placed)
        except Exception as e:  # recall never costs the turn
            recall.message = None
            logger.error(f"{self}: recall failed ({type(e).__name__}); the turn goes without")

    # -- the store: nothing here runs without a store -------------------------------------

    def _store_turn(self) -> None:
        """Count the turn; give a returning caller their memory once it has loaded (never
        waits: it joins the context at the first context frame after it arrives)."""
        recorder = self._recorder
        if recorder is None:
            return
        recorder.turns += 1
        loaded = recorder.take_memory() if recorder.memory_pending else None
        if loaded is None:
            return
        recorder.restoring(True)  # fact changes are recorded as "restored"
        try:
            self._session.load_memory(*loaded, in_flight=self.summary_in_flight)
        finally:
            recorder.restoring(False)

    async def _store_end(self, ended_by: str) -> None:
        """Record the final state and flush the queue (bounded by ``flush_timeout_s``)."""
        if self._recorder is None:
            return
        session = self._session
        try:
            await self._recorder.end(
                ended_by=ended_by,
                summary=self.summary_text,
                facts=session.facts,
                messages_in_context=len(self._context.messages),
                compactions=session.compactions,
                in_context=session.conversation_at_end(),
            )
        except Exception as e:  # the end of the call must reach the rest of the pipeline
            logger.error(f"{self}: recording the end of the call failed ({type(e).__name__})")
