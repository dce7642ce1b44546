"""``ContextSummarizer``: the Pipecat shell around the context's owner (frames, the background
task, events, the awaits of the store and recall). Whatever reads or writes the shared
context's messages is :class:`~pipecat_summarizer._session.owner.ContextSession`'s: this shell
passes it the time and whether a summary is in flight, and starts the jobs it returns.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
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
from pipecat_summarizer._compaction.calibration import TokenCalibrationReport
from pipecat_summarizer._compaction.ceiling import hook_request_reads
from pipecat_summarizer._compaction.trigger import effective_timeout, validate_config
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._record.interrupted import BARGE_IN_FRAMES
from pipecat_summarizer._record.pinned import Fact
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._session.owner import ContextSession, as_auto_config
from pipecat_summarizer._session.schedule import Job
from pipecat_summarizer._session.services import SummarizerLease, recall_turn
from pipecat_summarizer._session.steps import StepGuard
from pipecat_summarizer.events import ContextCompactedFrame, MessagesEvictedEvent
from pipecat_summarizer.guard import LLMRequestGuard
from pipecat_summarizer.params import ContextSummarizerParams, MemoryParams, RecallParams, as_params
from pipecat_summarizer.params import SummarizerOptions as SummarizerOptions  # 0.1 import
from pipecat_summarizer.params.memory import check_conversation_time
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.summarizers.base import Summarizer, as_result, describe_error
from pipecat_summarizer.tracing import attach_tracing

_COMPACTED, _OLD_COMPACTED = "on_context_compacted", "on_summary_applied"  # old: warns
_DOWN = FrameDirection.DOWNSTREAM
_HANDLED = (StartFrame, LLMSummarizeContextFrame, EndFrame, CancelFrame)  # and context frames


def _clock() -> float:
    # the loop's clock: a simulated-time loop (the replay's) governs backoff and latency
    return asyncio.get_running_loop().time()


class ContextSummarizer(FrameProcessor):
    """Summarizes older turns of the shared context in the background.

    Place it between the user aggregator and the main LLM. On each user-turn
    ``LLMContextFrame`` it checks Pipecat's thresholds; when one trips it starts one
    background summary of the oldest turns on a secondary LLM, and when the summary is back
    it splices it into the shared context (only if the summarized messages are still in
    place), keeping recent turns and anything added meanwhile verbatim.

    Event handlers:
        on_context_compacted(processor, ContextCompactedEvent) (``on_summary_applied`` warns)
        on_summary_failed(processor, SummaryFailedEvent)
        on_messages_evicted(processor, MessagesEvictedEvent)
        on_tool_results_cleared(processor, ToolResultsClearedEvent) (clearing alone)

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
                ``LLMContextSummarizationConfig``); ``None``: Pipecat's defaults.
            summarizer: The secondary LLM: a :class:`Summarizer` (``OpenAISummarizer``...)
                or any Pipecat ``LLMService``; ``None``: ``config.summary_config.llm``.
            params: Parameters beyond Pipecat's config, grouped by feature; safe defaults.
            options: Deprecated flat form of ``params`` (``SummarizerOptions``); warns.
            llm: The main LLM, so the ceiling also counts its ``system_instruction`` and
                tools (not needed with :meth:`after_llm` right after the LLM).
            store: A ``MemoryStore`` recording compactions, messages leaving the context,
                facts and the final state, off the hot path. ``None``: nothing is recorded.
            call_id: This call's id in the store (random if not given). Needs ``store``.
            user_id: The caller: their memory (or a dropped call) joins at the first turn
                after it has loaded, never waited for. Needs ``store``.
            memory: How the store is used (``MemoryParams``: resume, budgets, timeouts).
            recall: ``RecallParams``: the archive's best matches not in view, in one bounded
                message before each user turn (gives way first under the ceiling).
            **kwargs: Passed to ``FrameProcessor``.

        Raises:
            ValueError: No summarizer; ``min_messages_after_summary >=
                max_unsummarized_messages``; a store option or recall without a store.
            TypeError: ``context``, ``config``, ``summarizer`` or ``recall`` of a wrong type.
        """
        super().__init__(**kwargs)
        if not isinstance(context, LLMContext):
            raise TypeError("context must be the LLMContext shared with the aggregators")
        self._context = context
        self._config = as_auto_config(config)
        self._params = as_params(params, options)
        validate_config(self._config)
        self._lease = SummarizerLease(summarizer, self._config, str(self))
        self._summarizer = self._lease.summarizer
        self._session = ContextSession.build(
            context,
            self._config,
            self._params,
            self._summarizer,
            store=store,
            call_id=call_id,
            user_id=user_id,
            memory=memory,
            recall=recall,
            name=str(self),
        )
        self._recorder = self._session.recorder
        self._recall = self._session.recall
        self._session.ceiling.calibrate(self._params.calibration, self._session.meter, context)
        if llm is not None:
            self.attach_llm(llm)
        self._task: asyncio.Task | None = None
        if self._params.ceiling is not None:  # only a ceiling is held as a request is built
            hook_request_reads(context, self._prepare_at_serialization)
        self._steps = StepGuard(str(self), log_content=self._params.log_content)
        self._register_event_handler(_COMPACTED)
        self._register_event_handler("on_summary_failed")
        self._register_event_handler("on_messages_evicted")
        self._register_event_handler("on_tool_results_cleared")

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
    def token_calibration(self) -> TokenCalibrationReport:
        """The estimate against the main LLM's reported usage so far (errors, cache hits)."""
        return self._session.ceiling.calibration.summary()

    @property
    def call_id(self) -> str | None:
        """This call's id in the store (``None`` without a store)."""
        return self._recorder.call_id if self._recorder is not None else None

    def after_llm(self) -> LLMRequestGuard:
        """A new :class:`~pipecat_summarizer.guard.LLMRequestGuard` for right after the main
        LLM (``[user_agg, summarizer, llm, summarizer.after_llm(), tts, ...]``): it holds tool
        follow-ups to the ceiling and runs a handler's queued manual summary."""
        return LLMRequestGuard(self)

    def attach_llm(self, llm: LLMService) -> None:
        """Count the main LLM's ``system_instruction`` and tools under the ceiling, and read
        its reported usage (calibration). ``TypeError`` if not a Pipecat ``LLMService``."""
        self._session.ceiling.attach_llm(llm)

    def request_overhead_tokens(self) -> int:
        """Tokens every request carries besides the messages: the main LLM's
        ``system_instruction`` (when the LLM is known) and the context's tool schemas."""
        return self._session.request_overhead_tokens()

    def watch_responses(self) -> None:
        """Start a due compaction when the main LLM's response ends (called by the guard,
        which then reports responses): a tool round's call and result are known by then."""
        self._session.schedule.answer_wait.enabled = True

    async def llm_response(self, event: ResponseEvent) -> None:
        """The guard reports a response: ``"text"``, ``"tool_call"``, ``"end"`` (before the
        answer reaches the context). Never raises."""
        session = self._session
        if not session.schedule.ended and session.response(event):
            await self._guarded(
                lambda: session.response_ended(now=_clock(), in_flight=self.summary_in_flight)
            )

    async def prepare_request(self) -> None:
        """Make the context ready for a request this processor did not see (a tool
        follow-up, from the guard), as for a turn. Never raises (a failure is logged)."""
        if not self._session.schedule.ended:
            await self._evicted(await self._guarded(self._request))

    def request_manual_summary(self, config: LLMContextSummaryConfig | None = None) -> None:
        """Start a manual summary (queued behind one in flight), as ``LLMSummarizeContextFrame``;
        ``config`` overrides the processor's own fully."""
        self._start(self._manual(config))

    def pin(self, key: str, text: str, *, kind: str = "fact", source: str = "app") -> None:
        """Pin a fact under ``key`` (replacing any fact with that key) in every request.

        Args:
            key: The fact's key, for example ``"allergy"``.
            text: The fact, for example ``"allergic to peanuts"``.
            kind: ``"fact"`` or ``"constraint"``.
            source: ``"app"`` (the application: rendered with authority, last to leave
                over budget), or ``"llm"`` / ``"summary"`` (conversation facts, quoted data).

        Raises:
            ValueError: If the key or text is empty, or the kind or source unknown.
        """
        self._session.pin(key, text, kind=kind, source=source, in_flight=self.summary_in_flight)

    def unpin(self, key: str) -> bool:
        """Remove the pinned fact under ``key``; True if one was removed."""
        return self._session.unpin(key, in_flight=self.summary_in_flight)

    def mark_dropped(self) -> None:
        """This call dropped (a disconnect), even if an ``EndFrame`` ends it: resumable."""
        if self._recorder is not None:  # see MemoryParams.resume_dropped_within_s
            self._recorder.mark_dropped()

    def set_conversation_time(self, at: float) -> None:
        """The conversation's clock reads ``at`` from now on, and runs on from it.

        Archived messages are dated by the moment they entered the context, on this clock,
        and recall's "how long ago" counts from it. A transcript replayed with its own
        dates (LoCoMo's sessions, an imported chat history) calls it as each session starts,
        so a line said in one session and archived in a later one keeps its own session's
        date. ``MemoryParams(conversation_started_at=...)`` sets it for the call's start.
        Without a store nothing is dated: a no-op.

        Args:
            at: Seconds since the epoch, from 0 to the end of the year 9999.

        Raises:
            ValueError: If ``at`` is not such a number (milliseconds, NaN).
        """
        check_conversation_time("at", at)
        if self._recorder is not None:
            self._recorder.clock.set(float(at))

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Watch context frames, start summaries, and push every frame on."""
        await super().process_frame(frame, direction)
        timed = None  # the recall step of a user turn's frame: told when it was pushed on
        # the user turn's context frame first, with the fewest checks (it is the hot path);
        # its work is guarded as _guarded does, inlined: no closure nor coroutine per frame
        if isinstance(frame, LLMContextFrame):
            if direction is _DOWN and not frame.speculation and frame.context is self._context:
                steps, session, recall = self._steps, self._session, self._recall
                now = _clock()  # the recall budget bounds the frame's whole time from here
                if recall is not None:
                    session.clear_recalled()
                if not steps.failures.disabled:
                    session.step = "counting"
                    busy = (task := self._task) is not None and not task.done()
                    try:
                        job, event = session.turn(in_flight=busy, now=now)
                        if job is not None:
                            self._start(job)
                    except Exception as e:
                        if steps.failed(session.step, e):
                            await self._cancel_task()
                    else:
                        steps.succeeded()
                        if event is not None or session.cleared:
                            await self._evicted(event)
                    if recall is not None and not steps.failures.disabled:
                        await recall_turn(session, now)
                        timed = recall
        elif isinstance(frame, BARGE_IN_FRAMES):  # an answer the caller cut off is marked
            self._session.barge_in(frame)
        elif isinstance(frame, _HANDLED):
            if isinstance(frame, StartFrame):
                attach_tracing(self, self._summarizer)  # spans when Pipecat's enable_tracing
                if not self._session.schedule.ended:
                    self._lease.attach()
                self._session.start_call()  # the store's writer, the caller's memory, recall
            elif isinstance(frame, LLMSummarizeContextFrame):  # ours: not for the built-in too
                await self._guarded(lambda: self._start(self._manual(frame.config)))
                return
            else:  # EndFrame, CancelFrame
                await self._end("end" if isinstance(frame, EndFrame) else "cancel")
        await self.push_frame(frame, direction)
        if timed is not None:  # the frame's whole time, the push included, teaches the margin
            timed.frame_ended(now)

    async def _guarded(self, work: Callable[[], Any]) -> Any:
        """Run our synchronous work for a frame (a returned :class:`Job` starts); an exception
        costs no frame, repeated ones stop summarization (``StepGuard``)."""
        if self._steps.disabled:
            return None
        self._session.step = "counting"
        try:
            result = work()
        except Exception as e:
            if self._steps.failed(self._session.step, e):
                await self._cancel_task()
            return None
        self._steps.succeeded()
        if result.__class__ is Job:
            self._start(result)
        return result

    async def cleanup(self):
        """Cancel the in-flight summary, close the clients this processor built, clean up."""
        await self._end("cleanup")
        await super().cleanup()

    async def _end(self, ended_by: str) -> None:
        self._session.schedule.end()
        await self._cancel_task()
        if self._recall is not None:  # a search still running has no turn left to serve
            await self._recall.close()
        if self._recorder is not None:  # the final state; the queue flushed (bounded)
            await self._recorder.end_call(ended_by, self._session.final_state())
        await self._lease.release()

    def _request(self) -> MessagesEvictedEvent | None:  # a tool follow-up, as a turn
        m, event = self._session.prepare(self.summary_in_flight)
        self._start(self._session.request(m, now=_clock(), in_flight=self.summary_in_flight))
        return event

    async def _evicted(self, event: MessagesEvictedEvent | None) -> None:
        if event is not None:
            await self._call_event_handler("on_messages_evicted", event)
        for cleared in self._session.take_cleared():  # clearing without a compaction
            await self._call_event_handler("on_tool_results_cleared", cleared)

    def _prepare_at_serialization(self) -> None:
        """Hold the ceiling where the request is built, later appends included."""
        if self._params.ceiling is None or self._steps.disabled:
            return
        event = self._session.prepare_at_serialization(self.summary_in_flight)
        if event is not None:  # the handlers are async: reported right after the build
            self.create_task(self._evicted(event), f"{self}::evicted")

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
                await self._failed(job, describe_error(e), e)
            else:
                if self.usage_metrics_enabled and (usage := result.usage_frame(self.name, job)):
                    await self.push_frame(usage)  # the summary's usage, as a service reports it
                try:
                    applied = self._session.apply(job, result, now=_clock())
                    if applied is not None:
                        event, message = result.with_usage(applied[0]), applied[1]
                        await self.push_frame(
                            ContextCompactedFrame(message=message, event=event),
                            FrameDirection.UPSTREAM,
                        )
                        await self._call_event_handler(_COMPACTED, event)
                except Exception as e:  # a malformed result must not kill the processor
                    # no logger.exception: loguru's traceback shows local variables (messages)
                    logger.error(f"{self}: applying the summary failed ({type(e).__name__})")
                    await self._failed(job, f"{type(e).__name__} while applying", e)
        finally:
            self._task = None
        # the same guard as a frame's work: an error here must not end the task unreported
        await self._guarded(lambda: self._session.after_run(now=_clock()))

    async def _failed(self, job: Job, error: str, cause: BaseException | None = None) -> None:
        if cause is not None and self._params.log_content:
            logger.opt(exception=cause).debug(f"{self}: summary error detail: {cause!r}")
        event = self._session.failed(job, error, now=_clock())
        await self._call_event_handler("on_summary_failed", event)

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        self._session.cancelled()
        if task is not None and not task.done():
            await self.cancel_task(task)
