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
tool schemas. Everything else passes through untouched.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from loguru import logger
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import Frame, LLMContextFrame, LLMSummarizeContextFrame, StartFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService

from pipecat_summarizer.tokens import TokenCounter, count_text

if TYPE_CHECKING:
    from pipecat_summarizer.processor import ContextSummarizer


def tool_schemas(tools: Any, llm: LLMService | None = None) -> list[Any]:
    """The tool definitions a request carries, as close to the wire format as known.

    Args:
        tools: The context's tools (a ``ToolsSchema``, a provider list, or not given).
        llm: The main LLM, whose adapter converts the schema (and adds Pipecat's built-in
            tools, such as the async-tool cancel tool) exactly as it will be sent.

    Returns:
        A list of JSON-serializable tool definitions (empty when there are none).
    """
    if llm is not None:
        try:
            converted = llm.get_llm_adapter().from_standard_tools(tools)
        except Exception as e:  # an adapter quirk must not break metering
            logger.debug(f"tool schema conversion failed ({type(e).__name__}); using defaults")
        else:
            return list(converted) if isinstance(converted, (list, tuple)) else []
    if isinstance(tools, ToolsSchema):
        schemas: list[Any] = [s.to_default_dict() for s in tools.standard_tools]
        for custom in (tools.custom_tools or {}).values():
            schemas.extend(custom)
        return schemas
    return list(tools) if isinstance(tools, (list, tuple)) else []


def request_overhead(
    counter: TokenCounter,
    *,
    system_instruction: str | None = None,
    tools: Any = None,
    llm: LLMService | None = None,
) -> int:
    """Tokens a request carries besides the context messages.

    Args:
        counter: The per-message token counter (use the raw counter, not a cache: the
            texts counted here are temporary).
        system_instruction: The service's effective ``system_instruction`` (Pipecat appends
            its async-tool instructions to it), sent as a leading system message.
        tools: The context's tools.
        llm: The main LLM, for its adapter's tool conversion.

    Returns:
        The estimated tokens of the system instruction and the tool schemas.
    """
    total = 0
    if system_instruction:
        total += counter.count_message({"role": "system", "content": system_instruction})
    schemas = tool_schemas(tools, llm)
    if schemas:
        total += count_text(counter, json.dumps(schemas, default=str, ensure_ascii=False))
    return total


def overhead_key(system_instruction: str | None, tools: Any, llm: LLMService | None) -> tuple:
    """A cheap key that changes whenever :func:`request_overhead` may change."""
    builtin: tuple = ()
    if llm is not None:
        builtin = tuple(getattr(llm.get_llm_adapter(), "builtin_tools", None) or ())
    standard = getattr(tools, "standard_tools", None)
    names = tuple(s.name for s in standard) if standard is not None else id(tools)
    custom = getattr(tools, "custom_tools", None)
    return (system_instruction, id(tools), names, id(custom), builtin)


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
      was given), so the ceiling counts its ``system_instruction`` and tool schemas.

    Every other frame, and every frame whatever happens inside, is pushed on.

    Args:
        summarizer: The ``ContextSummarizer`` placed before the same LLM.
        **kwargs: Passed to ``FrameProcessor``.
    """

    def __init__(self, summarizer: ContextSummarizer, **kwargs):
        """Initialize the guard."""
        from pipecat_summarizer.processor import ContextSummarizer

        if not isinstance(summarizer, ContextSummarizer):
            raise TypeError(
                f"summarizer must be a ContextSummarizer, got {type(summarizer).__name__}"
            )
        super().__init__(**kwargs)
        self._summarizer = summarizer

    @property
    def summarizer(self) -> ContextSummarizer:
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
        if isinstance(frame, StartFrame) and s.llm is None:
            llm = self.previous
            if isinstance(llm, LLMService):
                s.attach_llm(llm)
            else:
                logger.warning(
                    f"{self}: not placed right after an LLM service; system_instruction and "
                    "tool schemas are counted only if ContextSummarizer(llm=...) is given"
                )
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
