"""The three context strategies the replay compares, one small class each.

Every strategy runs ``Pipeline([user_agg, *strategy.before_llm(), ReplayLLM, assistant_agg])``
with a real ``LLMContextAggregatorPair`` and reports into its
:class:`~pipecat_summarizer_cli.replay.recorder.Recorder` through public hooks only:

* :class:`FullBuffer`: no summarization.
* :class:`PipecatBuiltin`: ``LLMAssistantAggregatorParams(enable_auto_context_summarization=
  True)`` with the thresholds and the backend (metered) as its dedicated
  ``summary_config.llm``; counts from the aggregator's ``on_summary_applied`` event and the
  metered LLM.
* :class:`Ours`: ``ContextSummarizer`` between the user aggregator and the LLM, same
  thresholds, same backend (metered); counts from its ``on_context_compacted``,
  ``on_summary_failed`` and ``on_messages_evicted`` events and its public
  ``pending_messages``. Its hot path is timed by a subclass (:class:`TimedContextSummarizer`)
  around the public ``process_frame`` of each user-turn context frame: the processor's whole
  work on the frame, Pipecat's bookkeeping and the push included. Pipecat's built-in check
  runs inside the assistant aggregator where no public hook reaches it; its cost is
  measured by ``benchmarks/hot_path.py`` instead.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMAssistantAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer import (
    ContextSummarizer,
    ContextSummarizerParams,
    MessagesEvictedEvent,
)
from pipecat_summarizer.store import MemoryStore
from pipecat_summarizer_cli.replay.backends import (
    Backend,
    Meter,
    MeteredLLM,
    MeteredSummarizer,
    Outage,
)
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.report import TokenTable


@dataclass(frozen=True)
class Thresholds:
    """The trigger thresholds, shared by both summarizing strategies (Pipecat's defaults).

    Parameters:
        max_context_tokens: ``max_context_tokens`` (``None`` disables it).
        max_unsummarized_messages: ``max_unsummarized_messages`` (``None`` disables it).
        keep: ``min_messages_after_summary``.
        target_tokens: ``target_context_tokens``, the summary's output budget (``None``:
            Pipecat's default, 6,000, lowered by Pipecat to 80% of ``max_context_tokens``
            when larger).
    """

    max_context_tokens: int | None = 8000
    max_unsummarized_messages: int | None = 20
    keep: int = 4
    target_tokens: int | None = None

    def config(self, llm: LLMService | None = None) -> LLMAutoContextSummarizationConfig:
        """A fresh Pipecat config with these thresholds (and a dedicated LLM if given).

        Raises:
            ValueError: If Pipecat rejects the thresholds (both disabled, for example).
        """
        summary = LLMContextSummaryConfig(min_messages_after_summary=self.keep, llm=llm)
        if self.target_tokens is not None:
            summary.target_context_tokens = self.target_tokens
        return LLMAutoContextSummarizationConfig(
            max_context_tokens=self.max_context_tokens,
            max_unsummarized_messages=self.max_unsummarized_messages,
            summary_config=summary,
        )


@dataclass
class Setup:
    """What a strategy is built from.

    Parameters:
        thresholds: The trigger thresholds.
        backend: The summarizer backend (``None`` only for the full buffer).
        options: ``ContextSummarizerParams`` for ours.
        table: Token counts.
        latency: Modelled summarizer latency from output tokens (``None``: instant).
        outage: Turns during which the summarizer fails.
        store: Where ours archives the call (a SQLite path or a ``postgresql://`` DSN),
            as ``replay --store``; ``None``: no store.
        call_id: The call's id in that store.
    """

    thresholds: Thresholds
    backend: Backend | None
    options: ContextSummarizerParams
    table: TokenTable
    latency: Callable[[int], float] | None = None
    outage: Outage | None = None
    store: str | None = None
    call_id: str = "replay"


class Strategy:
    """One way of managing the context, built into one pipeline.

    Args:
        setup: What it is built from.
        recorder: Where its figures go.
    """

    name: ClassVar[str]
    summarizes: ClassVar[bool] = True

    def __init__(self, setup: Setup, recorder: Recorder):
        """Initialize the strategy."""
        if self.summarizes and setup.backend is None:
            raise ValueError(f"strategy {self.name} needs a summarizer backend")
        self.setup = setup
        self.recorder = recorder

    def meter(self, *, count_failures: bool) -> Meter:
        """The meter for this strategy's summarizer calls."""
        s = self.setup
        return Meter(
            self.recorder,
            s.table,
            latency=s.latency,
            outage=s.outage,
            count_failures=count_failures,
        )

    def assistant_params(self) -> LLMAssistantAggregatorParams:
        """Parameters of the assistant aggregator."""
        return LLMAssistantAggregatorParams()

    def before_llm(self, context: LLMContext) -> list[FrameProcessor]:
        """Processors between the user aggregator and the LLM."""
        return []

    def after_llm(self) -> list[FrameProcessor]:
        """Processors right after the LLM (called after :meth:`before_llm`)."""
        return []

    def watch(self, assistant: LLMAssistantAggregator) -> None:
        """Subscribe to the assistant aggregator's events."""

    def turn_ended(self) -> None:
        """Called after each turn (and any summary it started) has settled."""

    def extra(self) -> dict[str, Any]:
        """Strategy-specific report entries."""
        return {}

    async def finish(self) -> None:
        """Called once the pipeline has ended: release what the strategy opened."""


class FullBuffer(Strategy):
    """No summarization: the context grows with the call."""

    name = "full_buffer"
    summarizes = False


class PipecatBuiltin(Strategy):
    """Pipecat's built-in auto context summarization, on the same backend as ours."""

    name = "pipecat_builtin"

    def assistant_params(self) -> LLMAssistantAggregatorParams:
        """Auto summarization enabled with the metered backend as the dedicated LLM."""
        assert self.setup.backend is not None
        llm = MeteredLLM(self.setup.backend.make_llm(), self.meter(count_failures=True))
        return LLMAssistantAggregatorParams(
            enable_auto_context_summarization=True,
            auto_context_summarization_config=self.setup.thresholds.config(llm=llm),
        )

    def watch(self, assistant: LLMAssistantAggregator) -> None:
        """Count the applied summaries."""

        @assistant.event_handler("on_summary_applied")
        async def _applied(_agg, _summarizer, _event):
            self.recorder.summary_applied()


class TimedContextSummarizer(ContextSummarizer):
    """``ContextSummarizer`` that records the time it spends on each user-turn context frame.

    Args:
        sink: Receives the nanoseconds of each timed frame.
        **kwargs: Passed to ``ContextSummarizer``.
    """

    def __init__(self, *, sink: list[int], **kwargs: Any):
        """Initialize the processor."""
        super().__init__(**kwargs)
        self._sink = sink

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Process the frame; time it when it is a user-turn context frame."""
        if not (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.DOWNSTREAM
            and not frame.speculation
        ):
            await super().process_frame(frame, direction)
            return
        t0 = time.perf_counter_ns()
        await super().process_frame(frame, direction)
        self._sink.append(time.perf_counter_ns() - t0)


class Ours(Strategy):
    """``ContextSummarizer`` (this package), same thresholds and backend."""

    name = "pipecat_summarizer"

    def __init__(self, setup: Setup, recorder: Recorder):
        """Initialize the strategy."""
        super().__init__(setup, recorder)
        self.processor: ContextSummarizer | None = None
        self._store: MemoryStore | None = None

    def before_llm(self, context: LLMContext) -> list[FrameProcessor]:
        """The processor, with its events wired to the recorder."""
        assert self.setup.backend is not None
        rec = self.recorder
        store_args: dict[str, Any] = {}
        if self.setup.store is not None:
            from pipecat_summarizer_cli.replay.store_sink import REPLAY_MEMORY, replay_store

            self._store = replay_store(self.setup.store)
            store_args = {
                "store": self._store,
                "call_id": self.setup.call_id,
                "memory": REPLAY_MEMORY,
            }
        store_args.update(self.processor_args())
        ours = TimedContextSummarizer(
            sink=rec.hot_path_ns,
            context=context,
            config=self.setup.thresholds.config(),
            summarizer=MeteredSummarizer(
                self.setup.backend.make_summarizer(), self.meter(count_failures=False)
            ),
            params=self.setup.options,
            **store_args,
        )

        @ours.event_handler("on_messages_evicted")
        async def _evicted(_proc, event: MessagesEvictedEvent):
            rec.evicted(event.messages_evicted, event.pending_messages)

        @ours.event_handler("on_context_compacted")
        async def _applied(_proc, _event):
            rec.summary_applied()

        @ours.event_handler("on_summary_failed")
        async def _failed(_proc, _event):
            rec.summary_failed()

        self.processor = ours
        return [ours]

    def processor_args(self) -> dict[str, Any]:
        """More ``ContextSummarizer`` arguments (a subclass's)."""
        return {}

    def turn_ended(self) -> None:
        """Record the eviction queue."""
        if self.processor is not None:
            self.recorder.turn_ended(len(self.processor.pending_messages))

    def after_llm(self) -> list[FrameProcessor]:
        """The companion after the LLM, placed as the README recommends: it sees the
        follow-up request after a tool call and manual frames queued by the LLM."""
        assert self.processor is not None
        return [self.processor.after_llm()]

    async def finish(self) -> None:
        """Close the store (the processor flushed it at ``EndFrame``)."""
        if self._store is not None:
            await self._store.close()

    def extra(self) -> dict[str, Any]:
        """Evictions, when a ceiling is set."""
        if self.setup.options.ceiling is None:
            return {}
        return {
            "evictions": self.recorder.evictions,
            "messages_evicted": self.recorder.messages_evicted,
        }


class OursRecall(Ours):
    """Ours with a store and per-turn recall (``RecallParams()``): the baseline the clearing
    figure compares with. The store is ``--store``'s, or a SQLite file of its own for the
    run. Never in the default strategies (``--strategies ...,pipecat_summarizer_recall``)."""

    name = "pipecat_summarizer_recall"

    def __init__(self, setup: Setup, recorder: Recorder):
        """Initialize the strategy: its own store if none."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        store = setup.store
        if store is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="replay-recall-")
            store = str(Path(self._tmp.name) / "memory.db")
        super().__init__(replace(setup, options=self.options(setup.options), store=store), recorder)

    def options(self, options: ContextSummarizerParams) -> ContextSummarizerParams:
        """This strategy's ``ContextSummarizerParams`` (a subclass's change)."""
        return options

    def processor_args(self) -> dict[str, Any]:
        """Per-turn recall on the call's archive."""
        from pipecat_summarizer import RecallParams

        return {"recall": RecallParams()}

    async def finish(self) -> None:
        """Close the store and remove the run's own file."""
        await super().finish()
        if self._tmp is not None:
            self._tmp.cleanup()


class OursClearing(OursRecall):
    """:class:`OursRecall` with lossless tool-result clearing (``ClearingParams()``, its
    defaults): recall brings a cleared result back when the caller asks
    (``--strategies ...,pipecat_summarizer_clearing``)."""

    name = "pipecat_summarizer_clearing"

    def options(self, options: ContextSummarizerParams) -> ContextSummarizerParams:
        """The options with clearing."""
        from pipecat_summarizer import ClearingParams

        return replace(options, clearing=ClearingParams())


STRATEGY_CLASSES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (FullBuffer, PipecatBuiltin, Ours, OursRecall, OursClearing)
}
