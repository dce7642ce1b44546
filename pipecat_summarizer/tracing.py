"""Tracing, Pipecat's way: each compaction, failed summary, eviction under the ceiling, tool
result clearing and recall becomes an OpenTelemetry span in the conversation's trace.

It is switched on by Pipecat's own switch, ``PipelineWorker(..., enable_tracing=True)`` (with
the ``tracing`` extra installed and a tracer provider set up, e.g. Pipecat's
``setup_tracing``): the spans then sit in the same trace as Pipecat's ``conversation``,
``turn`` and service spans, each a child of the turn span current when the work ends (or of
the conversation span between turns). Without it, or without OpenTelemetry installed,
nothing here runs and OpenTelemetry is never imported.

Attributes follow the OpenTelemetry GenAI semantic conventions where they name one
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.memory.record.count``, ``gen_ai.conversation.id``, ``error.type``...); the rest are
under ``pipecat_summarizer.*``. No span carries conversation text, summary text or fact text:
counts, ids, reasons, outcomes, latencies and short hashes only (an event field is copied
only when it is a number, a boolean or one of the known identifier strings).
"""

from __future__ import annotations

import re
import time
import weakref
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING, Any

from loguru import logger

from pipecat_summarizer._recall.hooks import RecallObserver, RecallOutcome

if TYPE_CHECKING:
    from opentelemetry.context import Context

#: The instrumentation scope of every span here: the package's name.
TRACER_NAME = __name__.rpartition(".")[0]
#: A compaction: from the summary job's start to the splice (or to its failure).
SPAN_COMPACTION = "pipecat_summarizer.compaction"
#: Messages moved out of the context to hold the request ceiling.
SPAN_EVICTION = "pipecat_summarizer.eviction"
#: Tool results cleared (kept as placeholders, archived verbatim).
SPAN_CLEARING = "pipecat_summarizer.clearing"
#: A recall (a user turn's, or the ``recall_memory`` tool's): the conventions' memory span,
#: named after its operation.
SPAN_RECALL = "search_memory"

NS = "pipecat_summarizer."
# event fields that are identifiers (never text): copied as they are
_ID_FIELDS = frozenset({"reason", "summary_sha256"})
_HTTP = re.compile(r"\bHTTP (\d{3})\b")
_IDENT = re.compile(r"^[A-Za-z_][\w.]*")

_attached: weakref.WeakKeyDictionary[Any, SummarizerTracer] = weakref.WeakKeyDictionary()


def tracing_available() -> bool:
    """True if OpenTelemetry is importable (Pipecat's own check)."""
    from pipecat.utils.tracing.setup import is_tracing_available

    return is_tracing_available()


def attach_tracing(processor: Any, summarizer: Any = None) -> SummarizerTracer | None:
    """Trace ``processor``'s work if its pipeline traces (``enable_tracing``); once per
    processor. Called by the processor when its pipeline starts; never raises.

    Args:
        processor: A started ``ContextSummarizer`` (its ``processor_setup`` is read).
        summarizer: Its secondary LLM, for ``gen_ai.request.model``.

    Returns:
        The tracer, or ``None`` when the pipeline does not trace or OpenTelemetry is missing.
    """
    try:
        setup = processor.processor_setup
        if not setup.enable_tracing or not tracing_available():
            return None
        tracer = _attached.get(processor)
        if tracer is None:
            tracer = SummarizerTracer(processor, setup.tracing_context, summarizer=summarizer)
            _attached[processor] = tracer
        return tracer
    except Exception as e:  # tracing must never cost the call
        logger.warning(f"{processor}: tracing not attached ({type(e).__name__})")
        return None


def model_name(summarizer: Any) -> str | None:
    """The secondary LLM's model name, if it says (``OpenAISummarizer.model``, or a wrapped
    Pipecat service's ``settings.model``)."""
    model = getattr(summarizer, "model", None)
    if not isinstance(model, str):
        llm = getattr(summarizer, "llm", None)
        model = getattr(getattr(llm, "settings", None), "model", None)
    return model if isinstance(model, str) and model else None


def error_type(error: str) -> str:
    """A low-cardinality ``error.type`` for a failed summary's (log-safe) description:
    ``timeout``, an HTTP status (``"500"``), the exception's type, or ``_OTHER``."""
    if "timed out" in error or error.startswith("TimeoutError"):
        return "timeout"
    status = _HTTP.search(error)
    if status:
        return status.group(1)
    name = _IDENT.match(error)
    return name.group(0) if name else "_OTHER"


def event_attributes(event: Any) -> dict[str, Any]:
    """An event's numbers, booleans and identifier fields as ``pipecat_summarizer.*``
    attributes; any other string (or structure) is left out, so no text can slip in."""
    out: dict[str, Any] = {}
    if not is_dataclass(event):
        return out
    for f in fields(event):
        value = getattr(event, f.name)
        if isinstance(value, bool | int | float) or (
            f.name in _ID_FIELDS and isinstance(value, str)
        ):
            out[NS + f.name] = value
    return out


class SummarizerTracer:
    """Turns one processor's events into spans (see the module's docstring).

    Registered on the processor's public events (``on_context_compacted``,
    ``on_summary_failed``, ``on_messages_evicted``, and ``on_tool_results_cleared`` where the
    processor has it); recall through the recall step's observer hook (:class:`RecallSpans`:
    a user turn's recall and the ``recall_memory`` tool's).

    Args:
        processor: The ``ContextSummarizer``.
        tracing_context: Pipecat's pipeline-scoped ``TracingContext`` (the conversation and
            the current turn), or ``None`` (spans are then roots of their own traces).
        summarizer: The secondary LLM, for its model name.
    """

    def __init__(self, processor: Any, tracing_context: Any, *, summarizer: Any = None):
        """Register on the processor's events."""
        from opentelemetry import trace

        self._trace = trace
        self._tracer = trace.get_tracer(TRACER_NAME)
        self._context = tracing_context
        self._model = model_name(summarizer)
        self._call_id = getattr(processor, "call_id", None)
        processor.add_event_handler("on_context_compacted", self._compacted)
        processor.add_event_handler("on_summary_failed", self._failed)
        processor.add_event_handler("on_messages_evicted", self._evicted)
        if "on_tool_results_cleared" in _event_names(processor):
            processor.add_event_handler("on_tool_results_cleared", self._cleared)
        step = getattr(processor, "recall_step", None)
        if step is not None:
            step.add_observer(RecallSpans(self))

    # -- where a span goes ----------------------------------------------------------------

    def parent(self) -> Context | None:
        """The current turn's context, else the conversation's, else ``None`` (a root)."""
        ctx = self._context
        if ctx is None:
            return None
        return ctx.get_turn_context() or ctx.get_conversation_context()

    def span(
        self,
        name: str,
        attributes: dict[str, Any],
        *,
        start_ns: int,
        end_ns: int | None = None,
        error: str | None = None,
    ) -> None:
        """Record one finished span from ``start_ns`` to ``end_ns`` (now if ``None``)."""
        trace = self._trace
        attributes = {k: v for k, v in attributes.items() if v is not None}
        conversation = getattr(self._context, "conversation_id", None)
        if conversation:
            attributes.setdefault("gen_ai.conversation.id", conversation)
        if self._call_id:
            attributes.setdefault(NS + "call_id", self._call_id)
        try:
            span = self._tracer.start_span(
                name,
                context=self.parent(),
                kind=trace.SpanKind.INTERNAL,
                attributes=attributes,
                start_time=start_ns,
            )
            if error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, error))
            span.end(end_time=time.time_ns() if end_ns is None else end_ns)
        except Exception as e:  # tracing must never cost the call
            logger.warning(f"span {name} not recorded ({type(e).__name__})")

    # -- the events -----------------------------------------------------------------------

    def _summary_attributes(self) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "chat",  # the summary is a chat call to the secondary LLM
            "gen_ai.request.model": self._model,
            "gen_ai.output.type": "text",
        }

    async def _compacted(self, _processor: Any, event: Any) -> None:
        end = time.time_ns()
        attrs = self._summary_attributes()
        attrs.update(event_attributes(event))
        before, after = getattr(event, "tokens_before", None), getattr(event, "tokens_after", None)
        if isinstance(before, int) and isinstance(after, int):
            attrs[NS + "tokens_freed"] = before - after
        attrs.update(_usage(event))
        attrs[NS + "outcome"] = "applied"
        latency = float(getattr(event, "latency_s", 0.0) or 0.0)
        self.span(SPAN_COMPACTION, attrs, start_ns=end - int(latency * 1e9), end_ns=end)

    async def _failed(self, _processor: Any, event: Any) -> None:
        end = time.time_ns()
        attrs = self._summary_attributes()
        attrs.update(event_attributes(event))
        kind = error_type(str(event.error))
        attrs["error.type"] = kind
        attrs[NS + "outcome"] = "failed"
        # the failure's own time when the event carries it; else a timeout's is its limit
        latency = getattr(event, "latency_s", None)
        if latency is None and kind == "timeout":
            found = re.search(r"after ([\d.]+)s", str(event.error))
            latency = float(found.group(1)) if found else None
        if latency is not None:
            attrs[NS + "latency_s"] = float(latency)
        start = end - int(float(latency or 0.0) * 1e9)
        self.span(SPAN_COMPACTION, attrs, start_ns=start, end_ns=end, error=kind)

    async def _evicted(self, _processor: Any, event: Any) -> None:
        now = time.time_ns()
        attrs = event_attributes(event)
        attrs[NS + "reason"] = "ceiling"
        self.span(SPAN_EVICTION, attrs, start_ns=now, end_ns=now)

    async def _cleared(self, _processor: Any, event: Any) -> None:
        now = time.time_ns()
        latency = getattr(event, "latency_s", None)
        start = now - int(float(latency) * 1e9) if isinstance(latency, int | float) else now
        attrs = event_attributes(event)
        tools = getattr(event, "tools", None)
        if isinstance(tools, tuple) and all(isinstance(t, str) for t in tools):
            attrs[NS + "tools"] = tools  # the application's tool names, never their results
        self.span(SPAN_CLEARING, attrs, start_ns=start, end_ns=now)


def _usage(event: Any) -> dict[str, Any]:
    """``gen_ai.usage.*`` for a compaction: what the secondary LLM reported
    (``summary_prompt_tokens``...) when its response said, else the estimates (marked
    ``pipecat_summarizer.usage_estimated``)."""
    reported = _first_int(event, ("summary_prompt_tokens",))
    if reported is not None:
        return {
            "gen_ai.usage.input_tokens": reported,
            "gen_ai.usage.output_tokens": _first_int(event, ("summary_completion_tokens",)),
            "gen_ai.usage.cache_read.input_tokens": _first_int(event, ("summary_cached_tokens",)),
            NS + "usage_estimated": False,
        }
    return {
        "gen_ai.usage.input_tokens": _first_int(event, ("input_tokens",)),
        "gen_ai.usage.output_tokens": _first_int(event, ("summary_tokens",)),
        NS + "usage_estimated": True,
    }


def _first_int(obj: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _event_names(processor: Any) -> frozenset[str]:
    # Pipecat's BaseObject keeps its registered events in a dict; read, never written
    handlers = getattr(processor, "_event_handlers", None)
    return frozenset(handlers) if isinstance(handlers, dict) else frozenset()


class RecallSpans(RecallObserver):
    """A recall step's observer that makes each recall a span: a user turn's (``prepare``,
    kind ``turn``) and the ``recall_memory`` tool's (``lookup``, kind ``tool``), with the
    outcome, the latency and, for a placed block, its tokens; for the tool, how many records
    it returned. Nothing of what was found is read."""

    def __init__(self, tracer: SummarizerTracer):
        """Spans go to ``tracer``."""
        self._tracer = tracer

    def on_recall(self, outcome: RecallOutcome) -> None:
        """One span for the recall that just ended."""
        attrs: dict[str, Any] = {}
        if outcome.kind == "turn" and outcome.tokens is not None:
            attrs[NS + "recall.tokens"] = outcome.tokens
        elif outcome.kind == "tool" and outcome.error is None:
            attrs["gen_ai.memory.record.count"] = outcome.snippets
        _recall_span(
            self._tracer,
            outcome.kind,
            outcome.started_ns,
            outcome.outcome,
            attrs,
            end_ns=outcome.ended_ns,
            error=outcome.error,
        )


def _recall_span(
    tracer: SummarizerTracer,
    kind: str,
    start_ns: int,
    outcome: str,
    attrs: dict[str, Any] | None = None,
    *,
    end_ns: int,
    error: str | None = None,
) -> None:
    end = end_ns
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "search_memory",
        NS + "recall.kind": kind,
        NS + "outcome": outcome,
        NS + "latency_s": (end - start_ns) / 1e9,
        **(attrs or {}),
    }
    if error is not None:
        attributes["error.type"] = error
    tracer.span(SPAN_RECALL, attributes, start_ns=start_ns, end_ns=end, error=error)
