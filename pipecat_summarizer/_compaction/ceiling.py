"""The request ceiling (``CeilingParams.max_request_tokens``): what a request carries besides
the context messages.

The request overhead (pure counting: the main LLM's ``system_instruction`` and the tool
schemas, as close to the wire format as known) and :class:`RequestCeiling`, which holds the
context under ``max_request_tokens`` for the processor: the eviction step, the "nothing
evictable" memo and the eviction event. The processor and its guard import this module; it
imports neither.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from loguru import logger
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import CancelFrame, EndFrame, Frame, MetricsFrame
from pipecat.metrics.metrics import LLMUsageMetricsData
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService

from pipecat_summarizer._compaction.calibration import TokenCalibration, reported_input
from pipecat_summarizer._compaction.eviction import evict_for_ceiling
from pipecat_summarizer._compaction.measure import ContextMeter, content_fingerprint
from pipecat_summarizer._text.tokens import CachedCounter, TokenCounter, count_text
from pipecat_summarizer.events import MessagesEvictedEvent
from pipecat_summarizer.params import CeilingParams
from pipecat_summarizer.params.compaction import CalibrationParams


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


def hook_request_reads(context: LLMContext, before_request: Callable[[], None]) -> None:
    """Run ``before_request`` each time an LLM adapter reads ``context`` to build a request.

    The context is shared: between a frame passing the processor and the LLM serializing it,
    the aggregators append to it (the next user turn while the LLM is busy, the previous
    response's reply or tool calls). Every Pipecat LLM adapter reads the messages with
    ``context.get_messages(llm_specific_filter=...)`` when it builds a request (nothing else
    passes a filter), so this context's ``get_messages`` is wrapped to call
    ``before_request`` first; reads without a filter (aggregators, the processor) are
    untouched.

    Args:
        context: The shared context.
        before_request: A synchronous check (it must not raise).
    """
    original = context.get_messages

    def get_messages(llm_specific_filter: str | None = None, **kwargs: Any):
        if llm_specific_filter is not None:
            before_request()
        return original(llm_specific_filter, **kwargs)

    context.get_messages = get_messages  # type: ignore[method-assign]


class CeilingHost(Protocol):
    """What :meth:`RequestCeiling.evict` needs of the context's owner
    (``_session.shared.SharedContext``, through its public methods).

    The pending queue, the record's facts and the context writes stay the owner's: the
    ceiling decides what leaves, the host moves it.
    """

    def ceiling_messages(self) -> list:
        """The context's messages now (fingerprinted for the "nothing evictable" memo)."""
        ...

    def ceiling_view(self) -> list:
        """The context as the plan functions see it (without the conversation-facts and
        recalled messages)."""
        ...

    def ceiling_fixed_tokens(self) -> int:
        """Tokens of what is sent but never evicted and not in the view (the facts message)."""
        ...

    def ceiling_summary_message(self) -> Any:
        """The summary message in the context, by identity (never evicted)."""
        ...

    def ceiling_move_out(self, view: list, remaining: list, out: list) -> None:
        """Put ``remaining`` in place of ``view`` and queue ``out`` (in conversation order)
        for the next summary, pinning their facts if configured."""
        ...

    def ceiling_total_tokens(self) -> int:
        """The context's tokens now (without the request overhead)."""
        ...

    def ceiling_pending(self) -> int:
        """Messages waiting in the pending queue."""
        ...


class RequestCeiling:
    """The hard ceiling on what the main LLM receives (``ContextSummarizerParams.ceiling``).

    It owns the request overhead (the main LLM, once known, and a cache of what its
    ``system_instruction`` and the tool schemas cost), the eviction step (the oldest whole
    units leave for the pending queue, down to ``eviction_target_ratio`` of the ceiling),
    the memo of a context from which nothing more could be evicted (by content, so any
    change retries), and the eviction event. The processor calls :meth:`due` and
    :meth:`evict` for every request it prepares.

    Args:
        params: The ceiling; ``None`` disables eviction (the overhead is still counted).
        counter: The processor's token counter (cached per message object).
        protect_injected_system: Keep mid-call system/developer messages in place.
        stale_after: User turns after which an unresolved tool call no longer holds its unit.
        name: The processor's name, for the logs.
    """

    def __init__(
        self,
        params: CeilingParams | None,
        counter: CachedCounter,
        *,
        protect_injected_system: bool = True,
        stale_after: int | None = None,
        name: str = "ContextSummarizer",
    ):
        """Initialize the ceiling."""
        self.params = params
        self._counter = counter
        self._protect = protect_injected_system
        self._stale_after = stale_after
        self._name = name
        self._llm: LLMService | None = None
        self._overhead_key: tuple | None = None
        self._overhead_tokens = 0
        self._stuck: tuple[str, int] | None = None  # (fingerprint, overhead): nothing left
        # the main LLM's reported usage, matched with each request's estimate (calibrate())
        self.calibration = TokenCalibration(CalibrationParams(enabled=False))
        self._logged = False  # the call's calibration line was logged

    @property
    def llm(self) -> LLMService | None:
        """The main LLM whose ``system_instruction`` and tools are counted, if known."""
        return self._llm

    def attach_llm(self, llm: LLMService) -> None:
        """Count ``llm``'s ``system_instruction`` and tool schemas from now on.

        Raises:
            TypeError: If ``llm`` is not a Pipecat ``LLMService``.
        """
        if not isinstance(llm, LLMService):
            raise TypeError(f"llm must be a Pipecat LLMService, got {type(llm).__name__}")
        if self._llm is not None and self._llm is not llm:
            self._llm.remove_event_handler("on_before_push_frame", self._llm_pushed)
        if self.calibration.enabled and self._llm is not llm:
            # its usage reports pass here (it sits after this processor, which never sees them)
            llm.add_event_handler("on_before_push_frame", self._llm_pushed)
        self._llm = llm
        self._overhead_key = None

    def calibrate(
        self, params: CalibrationParams, meter: ContextMeter, context: LLMContext
    ) -> TokenCalibration:
        """Calibrate the estimate by the main LLM's reported usage (when it reports any).

        Each request the main LLM builds from ``context`` leaves its estimate (the messages
        it reads plus the request overhead, counted only when its report arrives); each
        usage report of that LLM (``MetricsFrame`` with ``LLMUsageMetricsData``, seen as the
        LLM pushes it) calibrates the ratio, which the ``meter``'s measurements carry to the
        thresholds and the cadence, and which this ceiling applies with its margin. Nothing
        is recorded while the LLM is unknown or its usage metrics are off.

        Args:
            params: The calibration's parameters (``enabled=False``: nothing is installed).
            meter: The context's meter.
            context: The shared context.

        Returns:
            The calibration (also :attr:`calibration`).
        """
        self.calibration = calibration = TokenCalibration(params)
        if not params.enabled:
            return calibration
        meter.calibration = calibration
        original = context.get_messages

        def get_messages(llm_specific_filter: str | None = None, **kwargs: Any):
            messages = original(llm_specific_filter, **kwargs)
            # an adapter building a request (a filter, never a copy truncated for its log)
            if llm_specific_filter is not None and not kwargs.get("truncate_large_values"):
                self._request_built(messages, context)
            return messages

        context.get_messages = get_messages  # type: ignore[method-assign]
        if self._llm is not None:
            self._llm.add_event_handler("on_before_push_frame", self._llm_pushed)
        return calibration

    def _request_built(self, messages: list, context: LLMContext) -> None:
        llm = self._llm
        if llm is None or not llm.usage_metrics_enabled:
            return  # no report will come: today's behaviour
        overhead, count = self.overhead(context.tools), self._counter.count_message
        # counted when the report arrives, off the request's path
        self.calibration.request(lambda: overhead + sum(count(m) for m in messages))

    def _llm_pushed(self, llm: Any, frame: Frame) -> None:
        """The main LLM pushes ``frame``: its usage report calibrates; its EndFrame or
        CancelFrame logs the call's calibration once (numbers only)."""
        if isinstance(frame, MetricsFrame):
            for data in frame.data:
                # its own report only: a summarizer's (ours) passes through it too
                if isinstance(data, LLMUsageMetricsData) and data.processor == llm.name:
                    counts = reported_input(data.value)
                    if counts is not None:
                        self.calibration.report(*counts)
        elif isinstance(frame, EndFrame | CancelFrame) and not self._logged:
            self._logged = True
            if self.calibration.calibrated:
                logger.info(f"{self._name}: {self.calibration.summary().log_line()}")

    def limit(self) -> int:
        """The ceiling in estimated tokens: ``max_request_tokens`` divided by the
        calibration's ceiling scale (exactly ``max_request_tokens`` uncalibrated)."""
        assert self.params is not None
        scale = self.calibration.ceiling_scale
        ceiling = self.params.max_request_tokens
        return ceiling if scale == 1.0 else int(ceiling / scale)

    def overhead(self, tools: Any) -> int:
        """Tokens every request carries besides the messages: the main LLM's
        ``system_instruction`` (when the LLM is known) and ``tools``' schemas; recounted
        only when one of them changed."""
        system = None
        if self._llm is not None:
            system = getattr(self._llm.settings, "system_instruction", None)
            system = system if isinstance(system, str) else None
        key = overhead_key(system, tools, self._llm)
        if key != self._overhead_key:
            self._overhead_key = key
            # the raw counter: these texts are temporary, not context objects to cache
            self._overhead_tokens = request_overhead(
                self._counter.counter, system_instruction=system, tools=tools, llm=self._llm
            )
        return self._overhead_tokens

    def due(self, total_tokens: int, overhead: int, messages: Sequence[Any]) -> bool:
        """Whether a request of ``total_tokens`` plus ``overhead`` must be evicted from:
        over the ceiling, and not a content eviction already found nothing to move from."""
        if self.params is None or total_tokens + overhead <= self.limit():
            return False
        return self._stuck != (content_fingerprint(messages), overhead)

    def room(self, total_tokens: int, overhead: int) -> int | None:
        """Tokens one more message's text may take before a request of ``total_tokens``
        plus ``overhead`` reaches the ceiling (``None`` without a ceiling): what the
        recalled block may use, so it never costs the conversation an eviction."""
        if self.params is None:
            return None
        framing = self._counter.counter.count_message({"role": "user", "content": ""})
        return self.limit() - total_tokens - overhead - framing

    def evict(self, host: CeilingHost, overhead: int = 0) -> MessagesEvictedEvent | None:
        """Evict the oldest units so the messages plus ``overhead`` fit the ceiling.

        Synchronous (it also runs as a request is built). Two passes at most: pinning the
        facts of evicted messages can grow the facts message.

        Returns:
            The event to report (already logged), or ``None`` if nothing was evicted.
        """
        if self.params is None:
            return None
        ceiling = self.limit()  # in estimated tokens (the calibration's scale applied)
        ratio = self.params.eviction_target_ratio
        evicted: list = []
        after = 0
        for _ in range(2):
            fixed = overhead + host.ceiling_fixed_tokens()
            view = host.ceiling_view()
            remaining, out = evict_for_ceiling(
                view,
                ceiling=max(0, ceiling - fixed),
                counter=self._counter,
                target=max(0, int(ceiling * ratio) - fixed),
                summary_message=host.ceiling_summary_message(),
                protect_injected_system=self._protect,
                stale_after=self._stale_after,
            )
            if out:
                host.ceiling_move_out(view, remaining, out)
                evicted.extend(out)
            after = host.ceiling_total_tokens() + overhead
            if not out or after <= ceiling:
                break
        self._stuck = None
        # reported in the provider's tokens once calibrated (scale 1.0: the estimate)
        reported = after if self.calibration.scale == 1.0 else int(after * self.calibration.scale)
        maximum = self.params.max_request_tokens
        if after > ceiling:
            # retry once the content changes
            self._stuck = (content_fingerprint(host.ceiling_messages()), overhead)
            logger.warning(
                f"{self._name}: context is ~{reported} tokens, over max_request_tokens={maximum}, "
                "and nothing more can be evicted (system prompt, pinned facts, summary, "
                "unresolved tool calls and the current turn stay)"
            )
        if not evicted:
            return None
        event = MessagesEvictedEvent(
            messages_evicted=len(evicted),
            tokens_evicted=sum(self._counter.count_message(m) for m in evicted),
            pending_messages=host.ceiling_pending(),
            tokens_after=reported,
            ceiling=maximum,
        )
        logger.info(f"{self._name}: {event.log_line()}")
        return event
