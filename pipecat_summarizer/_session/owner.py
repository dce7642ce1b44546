"""``ContextSession``: the one synchronous owner of the shared context's messages.

Everything that must stay consistent with the context's messages lives here: the pending
queue (evicted, not yet summarized) and its positions, the view without this package's own
messages, the detection of a context replaced by someone else (the meter's rewrite), the
reclaiming of our own messages' copies, the recalled block's place, the plan in flight, the
context writes the ceiling asks for (this object is the ceiling's ``CeilingHost``) and the
splice of a summary result.

Values in, values out: the processor passes the time and whether a summary is in flight;
it gets back a :class:`~pipecat_summarizer._session.schedule.Job` to start, the events to
emit, and the messages to archive go to the recorder sink it was given. There is no
``await`` in here, so "nothing runs between checking and splicing" holds by construction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loguru import logger
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer._compaction.cadence import ANSWERED_REASONS, ResponseEvent, offers_tools
from pipecat_summarizer._compaction.clearing import apply_clearing, plan_clearing
from pipecat_summarizer._compaction.eviction import pending_places, split_pending
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.plan import locate, splice
from pipecat_summarizer._compaction.trigger import trigger_reason
from pipecat_summarizer._recall.render import keep_recall
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer._session.resume import place_restored
from pipecat_summarizer._session.schedule import Job, choose_plan, compacted_event, request_for
from pipecat_summarizer._session.shared import SharedContext
from pipecat_summarizer._text.tokens import (
    CachedCounter,
    EstimateTokenCounter,
    as_token_counter,
    count_text,
)
from pipecat_summarizer.events import (
    ContextCompactedEvent,
    MessagesEvictedEvent,
    Reason,
    SummaryFailedEvent,
    ToolResultsClearedEvent,
)
from pipecat_summarizer.params import ContextSummarizerParams, MemoryParams, RecallParams
from pipecat_summarizer.params.recall import checked_copy
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.summarizers.base import Summarizer, SummaryResult


def as_auto_config(config: Any) -> LLMAutoContextSummarizationConfig:
    """Pipecat's auto config from what the application passed (``None``: the defaults)."""
    if config is None:
        return LLMAutoContextSummarizationConfig()
    if isinstance(config, LLMAutoContextSummarizationConfig):
        return config
    if hasattr(config, "to_auto_config"):  # the deprecated LLMContextSummarizationConfig
        return config.to_auto_config()
    raise TypeError(
        f"config must be an LLMAutoContextSummarizationConfig, got {type(config).__name__}"
    )


class ContextSession(SharedContext):
    """The only writer of the shared context's messages (see the module docstring); the
    state and the write path are :class:`SharedContext`'s, the summary's life is here.
    """

    # -- starting a summary ---------------------------------------------------------------

    def turn(
        self, *, in_flight: bool, now: float
    ) -> tuple[Job | None, MessagesEvictedEvent | None]:
        """A user turn's context frame: our copies reclaimed, a returning caller's memory
        in, the request prepared, the job to start if a compaction is due, and the eviction
        event. With nothing pinned, placed or replaced, the work is counting the messages
        added since the last frame and asking the trigger."""
        recorder = self.recorder
        if recorder is not None:
            recorder.entered(self.context.messages)  # dated as they come in
            if not recorder.memory_pending:
                recorder.turns += 1
                recorder = None  # counted; nothing to load
        recall = self.recall  # a forget by the caller cancels the late answer (as prepare)
        if (
            recorder is None
            and self.params.ceiling is None
            and self.quiet()
            and (recall is None or not recall.forgotten())
        ):
            # the common turn: nothing to reclaim, load, render or evict; the meter counts
            # the messages added since the last frame (a rewrite by others: the full path)
            self.step = "counting"
            meter = self.meter
            m = meter.measure(self.context.messages, self.record.summary_message)
            if not meter.rewritten:
                return self.request(m, now=now, in_flight=in_flight), None
        self.reclaim_own()
        if recorder is not None:
            self.caller_memory(in_flight=in_flight)
        m, event = self.prepare(in_flight, reclaimed=True)  # only our own writes since
        return self.request(m, now=now, in_flight=in_flight), event

    def request(self, m: Measurement, *, now: float, in_flight: bool) -> Job | None:
        """A request is prepared: the job to start if a compaction is due (or ``None``; with
        the companion reporting responses, a due one may wait for the response's end)."""
        self.step = "planning"
        if self.params.clearing is not None and not in_flight and self.job is None:
            m = self._clear_instead(m)
        reason = self.schedule.request(
            m,
            now=now,
            in_flight=in_flight,
            pending=bool(self.pending),
            tools=lambda: offers_tools(self.context.tools),
            compactions=self.compactions,
        )
        if reason is None:
            return None
        return self._start_due(reason, m, now, answer_pending=reason in ANSWERED_REASONS)

    def _clear_instead(self, m: Measurement) -> Measurement:
        """The token threshold trips and clearing tool results alone brings the context under
        it: clear them now, with no LLM call (the measurement after, or ``m`` unchanged)."""
        trigger = self.params.trigger
        if not trigger.auto:
            return m
        soft = trigger.soft_ratio
        if trigger_reason(self.config, m, soft, answer_pending=True) != "tokens":
            return m
        estimate = self.clear_tool_results(estimate_only=True)
        if estimate is None:
            return m
        freed = estimate.tokens_cleared
        under = m._replace(
            total_tokens=m.total_tokens - freed, reducible_tokens=m.reducible_tokens - freed
        )
        if trigger_reason(self.config, under, soft, answer_pending=True) is not None:
            return m  # a compaction is due anyway: clearing goes with it, one prefix break
        self.step = "clearing"
        event = self.clear_tool_results()
        if event is None:
            return m
        self.cleared.append(event)
        return self.measure()

    def response(self, event: ResponseEvent) -> bool:
        """The companion reports the main LLM's response; True on the end of one a
        compaction waits for (then call :meth:`response_ended`)."""
        wait = self.schedule.answer_wait
        if event == "text":
            wait.text()
        elif event == "tool_call":
            wait.tool_call()
        return event == "end" and wait.reason is not None

    def response_ended(self, *, now: float, in_flight: bool) -> Job | None:
        """The waited-on response ended: the job to start now, if any (a response that
        called tools leaves it to the follow-up request)."""
        self.step = "planning"
        waited = self.schedule.response_ended(in_flight=in_flight, compactions=self.compactions)
        if waited is None or self.check_replaced():
            return None  # a new conversation is planned afresh on its next request
        reason, m = waited
        return self._start_due(reason, m, now, answer_pending=self.schedule.answer_wait.answered)

    def _start_due(self, reason: Reason, m: Measurement, now: float, **kw: bool) -> Job | None:
        job = self.plan(reason, self.config.summary_config, self.summarizer, now, **kw)
        if job is None:
            self.schedule.trigger.nothing_to_plan(m)
            self.schedule.warn_blocked(reason, len(self.pending))
        return job

    def manual(
        self, override: LLMContextSummaryConfig | None, *, now: float, in_flight: bool
    ) -> Job | None:
        """A manual summary (``LLMSummarizeContextFrame``): the job, or ``None`` (queued
        behind the one in flight, or nothing to summarize)."""
        if in_flight:
            logger.debug(f"{self}: summary in flight; manual summary queued")
            self.schedule.queue_manual(override)
            return None
        config, summarizer = self.schedule.manual_config(override, self.summarizer)
        job = self.plan("manual", config, summarizer, now)
        if job is None:
            logger.info(f"{self}: manual summary requested, but nothing can be summarized")
        return job

    def plan(
        self,
        reason: Reason,
        config: LLMContextSummaryConfig,
        summarizer: Summarizer,
        now: float,
        *,
        answer_pending: bool = False,
    ) -> Job | None:
        """Plan a compaction now; the job becomes the plan in flight (``None``: none, and
        always once the call has ended: a manual request arriving after it starts nothing)."""
        if self.schedule.ended:
            return None
        self.step = "planning"
        self.schedule.blocked = None
        self.check_replaced()  # a replaced context's pending messages are never planned
        record = self.record
        summary_message = record.summary_in(self.context.messages)
        previous = record.summary_text if summary_message is not None else None
        schedule = self.schedule
        plan, schedule.blocked = choose_plan(
            self.logical(),
            reason=reason,
            config=config,
            params=self.params,
            trigger=schedule.trigger,
            counter=self.meter.counter,
            summary_message=summary_message,
            previous_tokens=record.summary_tokens if previous else 0,
            reducible_tokens=lambda: self.measure().reducible_tokens,
            answer_pending=answer_pending,
            name=self._name,
        )
        if plan is None:
            return None
        self.step = "rendering"
        request = request_for(
            plan,
            config=config,
            previous=previous,
            input_budget=self.params.max_summary_input_tokens,
            trigger=schedule.trigger,
            interrupted=self.record.interruptions.ids(),
            notices=() if self.notice is None else (id(self.notice),),
        )
        logger.debug(
            f"{self}: summarizing {len(plan.summarized)} messages ({reason}), "
            f"~{plan.input_tokens} input tokens, {plan.deferred} deferred"
        )
        self.job = Job(plan, request, reason, config, summarizer, now)
        return self.job

    def after_run(self, *, now: float) -> Job | None:
        """The summary task ended: what was deferred meanwhile, then the queued manual
        summary or the backlog's next compaction, if any."""
        self.job = None
        self.step = "pinning"
        self.fold_and_refresh(in_flight=False)
        self.render_record(in_flight=False)
        queued, override = self.schedule.take_manual()
        if queued:
            return self.manual(override, now=now, in_flight=False)
        if self.schedule.trigger.chain_backlog(pending=bool(self.pending), now=now):
            return self.plan("backlog", self.config.summary_config, self.summarizer, now)
        return None

    def cancelled(self) -> None:
        """The summary task was cancelled: no plan in flight, no manual summary queued."""
        self.job = None
        self.schedule.take_manual()

    # -- a summary's result ---------------------------------------------------------------

    def apply(
        self, job: Job, result: SummaryResult, *, now: float
    ) -> tuple[ContextCompactedEvent, dict] | None:
        """Splice ``result`` in place of the planned messages, if they are still in place.

        Returns:
            The event and the summary message, or ``None`` (the context changed meanwhile:
            nothing applied).
        """
        self.check_replaced()  # a replaced context's pending messages are not spliced in
        record = self.record
        logical = self.logical()
        start = locate(logical, job.plan)
        if start is None:
            logger.warning(
                f"{self}: context changed while summarizing (the summarized messages are no "
                "longer in place); summary discarded, nothing applied"
            )
            return None
        self.schedule.trigger.summary_applied()
        draft = record.absorb(result.text, result.sections, job.config)
        new_logical = splice(logical, job.plan, draft.message, start)
        assert new_logical is not None  # located above, and nothing ran in between
        before = self.measure()
        kept = len(logical) - start - len(job.plan.replaced)
        new_messages, self.pending = split_pending(new_logical, self.pending)
        self.pending_places = pending_places(new_logical, self.pending, draft.message)
        recall = self.recall
        if recall is not None and recall.message is not None:
            # landed after this turn's block was placed: the block stays before its question
            placed = keep_recall(self.context.messages, new_messages, recall.message)
            if placed is None:
                recall.message = None
            else:
                new_messages = placed
        self.write(new_messages)
        counter = self.meter.counter
        # summarized messages leave the token cache, so it does not keep them alive
        counter.forget_except([*new_messages, *self.pending])
        record.commit(draft)
        self.schedule.applied()
        self.render_record(in_flight=True)
        # in the same write as the splice, for the prompt cache: one prefix break
        cleared = self.clear_tool_results() if self.params.clearing is not None else None
        after = self.meter.measure(self.context.messages, draft.message)
        self.compactions += 1
        event = compacted_event(
            job,
            draft,
            before,
            after,
            kept=kept,
            now=now,
            counter=counter,
            compaction=self.compactions,
            pending=len(self.pending),
            facts=len(record.facts),
        )
        if cleared is not None:
            event = replace(
                event,
                tool_results_cleared=cleared.tool_results_cleared,
                tokens_cleared=cleared.tokens_cleared,
            )
        logger.info(f"{self}: {event.log_line()}")
        if self.recorder is not None:
            model = getattr(job.summarizer, "model", None)
            self.recorder.applied(event, job.plan.summarized, draft.text, model)
        return event, draft.message

    def failed(self, job: Job, error: str, *, now: float) -> SummaryFailedEvent:
        """The summary failed: the context is left untouched; the event to emit."""
        event = self.schedule.failed(job.reason, error, now)
        event = replace(event, latency_s=max(0.0, now - job.started))
        if self.recorder is not None:
            model = getattr(job.summarizer, "model", None)
            self.recorder.failed(job.reason, error, now - job.started, model)
        return event

    # -- tool-result clearing -------------------------------------------------------------

    def clear_tool_results(self, *, estimate_only: bool = False) -> ToolResultsClearedEvent | None:
        """Clear the bulky tool results of the view (``params.clearing``) in one write; the
        originals are archived verbatim (``"cleared"``). Call only with no plan in flight:
        a cleared message would no longer be where the plan expects it.

        Args:
            estimate_only: Write nothing; the event carries the estimated tokens freed.

        Returns:
            The event (tokens freed measured after the write), or ``None``: nothing to clear.
        """
        params = self.params.clearing
        if params is None:
            return None
        archived = self.recorder is not None
        view = self.view()
        counter = self.meter.counter
        clearing = plan_clearing(view, params, counter.count_message, archived=archived)
        if not clearing:
            return None
        before = self.measure()
        if estimate_only:
            total, freed = before.total_tokens, clearing.freed_tokens
            n = len(clearing.indices)
            return ToolResultsClearedEvent(n, freed, total, total - freed, clearing.tools)
        new_view, originals = apply_clearing(view, clearing, archived=archived)
        swap = {id(o): new_view[i] for o, i in zip(originals, clearing.indices, strict=True)}
        self.write([swap.get(id(m), m) for m in self.context.messages])
        if self.recorder is not None:
            self.recorder.archive(originals, "cleared")
        counter.forget_except([*self.context.messages, *self.pending])
        after = self.measure()
        event = ToolResultsClearedEvent(
            len(originals),
            before.total_tokens - after.total_tokens,
            before.total_tokens,
            after.total_tokens,
            clearing.tools,
        )
        logger.info(f"{self}: {event.log_line()}")
        return event

    def take_cleared(self) -> list[ToolResultsClearedEvent]:
        """The clearings that ran without a compaction since the last call (to emit)."""
        cleared, self.cleared = self.cleared, []
        return cleared

    # -- the store ------------------------------------------------------------------------

    def start_call(self) -> None:
        """At ``StartFrame``: the recorder's writer and the caller's memory, then recall
        (and the caller's forget tombstone, read before the memory: its baseline)."""
        if self.recorder is not None:
            self.recorder.start()
            if self.recall is not None:
                self.recall.start()
                self.recorder.read_forget_baseline(self.recall)

    def caller_memory(self, *, in_flight: bool) -> None:
        """Count the turn; a returning caller's memory joins once it has loaded (never
        waits: it joins at the first context frame after it arrives)."""
        recorder = self.recorder
        if recorder is None:
            return
        recorder.turns += 1
        loaded = recorder.take_memory() if recorder.memory_pending else None
        resumed = recorder.take_resumed()
        if resumed is not None and (in_flight or self.compactions or self.pending):
            # this call's own conversation was already summarized: older verbatim messages
            # cannot go before it, so the memory joins as after a goodbye
            logger.info(f"{self}: dropped call {resumed.call_id} not resumed (compacted since)")
            resumed = None
        if resumed is not None:  # the dropped call's own summary and facts, as it had them
            earlier = loaded[1] if loaded is not None else None  # it had no summary: today's
            loaded = (resumed.facts, resumed.summary or earlier)
        if loaded is None:
            return
        recorder.restoring(True)  # fact changes are recorded as "restored"
        try:
            self.load_memory(*loaded, in_flight=in_flight)
            if resumed is not None:  # after the head, the facts and the summary
                self.notice = resumed.messages[-1]  # restore() closes them with it
                own = (self.record.noted_message, self.record.summary_message)
                self.write(place_restored(self.context.messages, resumed.messages, own))
        finally:
            recorder.restoring(False)

    def final_state(self) -> dict[str, Any]:
        """The call's state at its end, as ``CallRecorder.end`` records it."""
        return {
            "summary": self.summary_text,
            "facts": self.facts,
            "messages_in_context": len(self.context.messages),
            "compactions": self.compactions,
            "in_context": self.conversation_at_end(),
        }

    @classmethod
    def build(
        cls,
        context: LLMContext,
        config: LLMAutoContextSummarizationConfig,
        params: ContextSummarizerParams,
        summarizer: Summarizer,
        *,
        store: MemoryStore | None,
        call_id: str | None,
        user_id: str | None,
        memory: MemoryParams | None,
        recall: RecallParams | None,
        name: str,
    ) -> ContextSession:
        """The session with its parts, built in dependency order (the counter, the store's
        recorder, recall, then the session): nothing reads a part not yet built.

        Raises:
            ValueError: A store option (``memory``, ``user_id``, ``call_id``), ``recall``
                without a store, or a field of ``recall`` out of range (set after it was
                built).
            TypeError: ``recall`` is not a ``RecallParams``, or one of its fields has the
                wrong type.
        """
        clearing = params.clearing
        if store is None and clearing is not None and not clearing.without_store:
            raise ValueError(
                "clearing needs a store to archive the cleared results "
                "(store=SQLiteMemoryStore(...)), or clearing=ClearingParams(without_store=True) "
                "to accept that the cleared text is gone"
            )
        if store is None:
            for field, value in (("memory", memory), ("user_id", user_id), ("call_id", call_id)):
                if value is not None:  # silently ignored, it would record nothing
                    raise ValueError(f"{field} needs a store (store=SQLiteMemoryStore(...))")
        recorder = CallRecorder(store, call_id, user_id, memory) if store is not None else None
        counter = CachedCounter(as_token_counter(params.token_counter or EstimateTokenCounter()))
        step = None
        if recall is not None:
            if not isinstance(recall, RecallParams):
                raise TypeError(f"recall must be a RecallParams, got {type(recall).__name__}")
            recall = checked_copy(recall)  # a field set after construction is refused here
            if store is None or recorder is None:
                raise ValueError("recall needs a store (store=SQLiteMemoryStore(...))")
            step = RecallStep(
                store,
                recall,
                call_id=recorder.session_id,  # the store key of this session
                user_id=user_id,
                # the raw counter: a bare string is never cached, and counting it through
                # the cache would keep a throwaway message per count, evicting the context's
                count=lambda text: count_text(counter.counter, text),
                settle=recorder.writer.flush,
                now=recorder.now,
            )
        return cls(
            context,
            config,
            params,
            summarizer=summarizer,
            counter=counter,
            recorder=recorder,
            recall=step,
            name=name,
        )
