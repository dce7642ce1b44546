"""``LLMRequestGuard``: the companion of ``ContextSummarizer`` that sits right after the main LLM.

Two kinds of traffic reach the main LLM without passing the processor placed before it:

- the follow-up request after a tool call: Pipecat's assistant aggregator appends the
  result and pushes an ``LLMContextFrame`` *upstream*, straight back to the LLM;
- ``LLMSummarizeContextFrame`` queued by a function handler with
  ``params.llm.queue_frame(...)`` (Pipecat's manual-summarization route): it leaves the LLM
  *downstream*, and Pipecat's built-in summarizer in the assistant aggregator would run it
  on the main LLM.

The guard sees both before they matter: it holds the follow-up to ``max_request_tokens``
with the processor's own eviction, and hands the manual frame to the processor, which
summarizes on the secondary LLM; the frame goes no further. It also tells the processor
which LLM it sits next to, so the ceiling counts that LLM's ``system_instruction`` and the
tool schemas, and reports each response as it passes (text, tool calls, its end, before the
answer reaches the context), so a compaction due on a request starts once the answer's shape
is known (a tool round keeps no more than a text answer). Everything else passes through
untouched.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    FunctionCallInProgressFrame,
    FunctionCallsStartedFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMSummarizeContextFrame,
    LLMTextFrame,
    StartFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._compaction.cadence import ResponseEvent


@runtime_checkable
class GuardedProcessor(Protocol):
    """What the guard needs of the processor before the LLM (``ContextSummarizer``).

    A protocol, so this module does not import the processor (which imports this one).
    """

    @property
    def context(self) -> LLMContext:
        """The shared context."""
        ...

    @property
    def llm(self) -> LLMService | None:
        """The main LLM, once known."""
        ...

    def attach_llm(self, llm: LLMService) -> None:
        """Count ``llm``'s system_instruction and tool schemas under the ceiling."""
        ...

    def request_manual_summary(self, config: LLMContextSummaryConfig | None = None) -> None:
        """Start a manual summary on the secondary LLM."""
        ...

    async def prepare_request(self) -> None:
        """Make the context ready for a request the processor did not see go by."""
        ...

    def watch_responses(self) -> None:
        """Wait for each response's end before starting a compaction due on its request."""
        ...

    async def llm_response(self, event: ResponseEvent) -> None:
        """A response of the main LLM, as it passes: text, a tool call, its end."""
        ...


# The response frames the guard reports to the processor.
_RESPONSE_EVENTS: tuple[tuple[type[Frame], ResponseEvent], ...] = (
    (LLMTextFrame, "text"),
    (FunctionCallsStartedFrame, "tool_call"),
    (FunctionCallInProgressFrame, "tool_call"),
    (LLMFullResponseEndFrame, "end"),
)


def response_event(frame: Frame) -> ResponseEvent | None:
    """What ``frame``, leaving the main LLM downstream, tells of its response (or ``None``)."""
    return next((event for kind, event in _RESPONSE_EVENTS if isinstance(frame, kind)), None)


class LLMRequestGuard(FrameProcessor):
    """The companion processor placed right after the main LLM.

    Get it from :meth:`ContextSummarizer.after_llm` (one per processor, one per pipeline)::

        pipeline = Pipeline([transport.input(), stt, user_agg,
                             summarizer, llm, summarizer.after_llm(),
                             tts, transport.output(), assistant_agg])

    - Upstream ``LLMContextFrame`` of the shared context (the follow-up request after a tool
      call): the processor puts its pinned facts in place and evicts to
      ``max_request_tokens`` before the frame goes on to the LLM.
    - Downstream ``LLMSummarizeContextFrame`` (queued by a function handler): consumed and
      summarized by the processor on the secondary LLM, with its config override honoured;
      Pipecat's built-in summarizer never sees it.
    - ``StartFrame``: the LLM just before the guard is attached to the processor (unless one
      was given), so the ceiling counts its ``system_instruction`` and tool schemas, and the
      processor is told the guard reports that LLM's responses.
    - Downstream ``LLMTextFrame``, function-call frames and ``LLMFullResponseEndFrame``:
      reported to the processor (the end before the frame goes on towards the assistant
      aggregator, which puts the answer in the context).

    Every other frame, and every frame whatever happens inside, is pushed on.

    Args:
        summarizer: The ``ContextSummarizer`` placed before the same LLM.
        **kwargs: Passed to ``FrameProcessor``.
    """

    def __init__(self, summarizer: GuardedProcessor, **kwargs):
        """Initialize the guard."""
        if not isinstance(summarizer, GuardedProcessor):
            raise TypeError(
                f"summarizer must be a ContextSummarizer, got {type(summarizer).__name__}"
            )
        super().__init__(**kwargs)
        self._summarizer = summarizer

    @property
    def summarizer(self) -> GuardedProcessor:
        """The processor this guard works for."""
        return self._summarizer

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Guard requests that bypass the processor; push every other frame on.

        Args:
            frame: The frame.
            direction: Its direction.
        """
        await super().process_frame(frame, direction)
        s = self._summarizer
        if isinstance(frame, StartFrame):
            llm = self.previous
            if isinstance(llm, LLMService):
                s.watch_responses()  # it is the LLM's own responses that pass here
                if s.llm is None:
                    s.attach_llm(llm)
            elif s.llm is None:
                logger.warning(
                    f"{self}: not placed right after an LLM service; system_instruction and "
                    "tool schemas are counted only if ContextSummarizer(llm=...) is given"
                )
        elif direction == FrameDirection.DOWNSTREAM and (event := response_event(frame)):
            try:
                await s.llm_response(event)
            except Exception as e:  # the response goes on whatever happens here
                logger.error(f"{self}: reporting the response failed ({type(e).__name__})")
        elif isinstance(frame, LLMSummarizeContextFrame) and direction == FrameDirection.DOWNSTREAM:
            try:
                s.request_manual_summary(frame.config)
            except Exception as e:  # the frame is ours either way: never the built-in's
                logger.error(f"{self}: manual summary request failed: {type(e).__name__}")
            return
        elif (
            isinstance(frame, LLMContextFrame)
            and direction == FrameDirection.UPSTREAM
            and not frame.speculation
            and frame.context is s.context
        ):
            try:
                await s.prepare_request()
            except Exception as e:  # the request goes out unchanged rather than not at all
                logger.error(
                    f"{self}: preparing the follow-up request failed "
                    f"({type(e).__name__}); sent unchanged"
                )
        await self.push_frame(frame, direction)
