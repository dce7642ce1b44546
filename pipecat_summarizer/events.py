"""Event payloads, the upstream notification frame, and the one-line compaction log.

A compaction has one name: the ``on_context_compacted`` handler receives a
:class:`ContextCompactedEvent` and the processor pushes a :class:`ContextCompactedFrame`.
The 0.2 names (``SummaryAppliedEvent``, which Pipecat also has with other fields, and
``ContextSummaryAppliedFrame``) work for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pipecat.frames.frames import SystemFrame

#: What triggered a compaction.
Reason = Literal["tokens", "messages", "manual", "backlog"]


def short_sha256(text: str) -> str:
    """First 12 hex digits of the sha256 of ``text``: enough to tell summaries apart in logs."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass(frozen=True)
class ContextCompactedEvent:
    """Figures for one applied compaction (``on_context_compacted``).

    Parameters:
        reason: What triggered it: ``"tokens"``, ``"messages"``, ``"manual"``, or
            ``"backlog"`` (draining messages evicted under the ceiling).
        messages_before: Context messages just before the splice.
        messages_after: Context messages just after the splice.
        messages_summarized: Conversation messages folded into the summary.
        messages_kept: Messages after the summary message at the moment of the splice
            (pinned-facts and recalled blocks not counted): the planned tail plus every
            message that arrived while the summary ran. The planned tail is
            ``min_messages_after_summary``, the answer to the request that started the
            compaction among them (more only to keep a tool call with its result). So, with
            keep 4: 4 when the summary lands after that answer and before the next user turn;
            3 when it lands while the answer is still on its way (the tail is 4 once it
            arrives); 4 + 2 per exchange that completed while it ran (5, 7... when it lands
            between a user turn and its answer). Pipecat's ``preserved_message_count`` counts
            the same messages plus its leading system message.
        tokens_before: Estimated context tokens just before the splice.
        tokens_after: Estimated context tokens just after the splice.
        summary_tokens: Estimated tokens of the summary message.
        input_tokens: Estimated tokens sent to the summarizer (prompt included).
        latency_s: Seconds from the request to the splice.
        summary_sha256: Short sha256 of the summary text.
        compaction: 1 for the first compaction of this processor, then 2, 3...
        pending_messages: Evicted messages still waiting for a summary afterwards.
        pinned_facts: Facts in the pinned block afterwards.
        tool_results_cleared: Tool results cleared in the same write (``clearing=``).
        tokens_cleared: Tokens the clearing freed, measured on the context after the write.
        summary_prompt_tokens: Input tokens the secondary LLM reported for this summary
            (``None``: its response reported no usage).
        summary_completion_tokens: Output tokens it reported.
        summary_cached_tokens: Of the input, tokens read from its prompt cache.
    """

    reason: Reason
    messages_before: int
    messages_after: int
    messages_summarized: int
    messages_kept: int
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    input_tokens: int
    latency_s: float
    summary_sha256: str
    compaction: int
    pending_messages: int = 0
    pinned_facts: int = 0
    tool_results_cleared: int = 0
    tokens_cleared: int = 0
    summary_prompt_tokens: int | None = None
    summary_completion_tokens: int | None = None
    summary_cached_tokens: int | None = None

    def log_fields(self) -> dict[str, Any]:
        """The event as a flat dict (for logs and sinks)."""
        fields = asdict(self)
        fields["latency_s"] = round(self.latency_s, 3)
        return fields

    def log_line(self) -> str:
        """One structured line: ``context compacted key=value ...``."""
        return "context compacted " + " ".join(f"{k}={v}" for k, v in self.log_fields().items())


@dataclass(frozen=True)
class MessagesEvictedEvent:
    """Messages moved out of the context to keep a request under the ceiling
    (``on_messages_evicted``). They wait in the pending queue for the next summary.

    Parameters:
        messages_evicted: Messages moved by this eviction.
        tokens_evicted: Their estimated tokens.
        pending_messages: Messages in the pending queue afterwards.
        tokens_after: Estimated context tokens afterwards (scaled by the main LLM's
            reported usage once it calibrated the estimate).
        ceiling: The ``max_request_tokens`` in force.
    """

    messages_evicted: int
    tokens_evicted: int
    pending_messages: int
    tokens_after: int
    ceiling: int

    def log_line(self) -> str:
        """One structured line: ``context evicted key=value ...``."""
        return "context evicted " + " ".join(f"{k}={v}" for k, v in asdict(self).items())


@dataclass(frozen=True)
class ToolResultsClearedEvent:
    """Tool results cleared without a compaction (``on_tool_results_cleared``): the token
    threshold tripped and clearing alone brought the context under it, so no summary ran.
    Clearing that runs with a compaction is reported in its ``ContextCompactedEvent``.

    Parameters:
        tool_results_cleared: Tool results whose content became a placeholder.
        tokens_cleared: Tokens freed, measured on the context after the write.
        tokens_before: Context tokens just before the write.
        tokens_after: Context tokens just after the write.
        tools: The cleared results' tool names, in context order.
    """

    tool_results_cleared: int
    tokens_cleared: int
    tokens_before: int
    tokens_after: int
    tools: tuple[str, ...] = ()

    def log_line(self) -> str:
        """One structured line: ``tool results cleared key=value ...`` (counts only)."""
        fields = {k: v for k, v in asdict(self).items() if k != "tools"}
        return "tool results cleared " + " ".join(f"{k}={v}" for k, v in fields.items())


@dataclass(frozen=True)
class SummaryFailedEvent:
    """A failed summary attempt (``on_summary_failed``); the context was left untouched.

    Parameters:
        error: What went wrong.
        consecutive_failures: Failures in a row, this one included.
        reason: What triggered the attempt.
        retry_in_s: Seconds before the next automatic attempt is allowed.
        latency_s: Seconds from the attempt's start to its failure.
    """

    error: str
    consecutive_failures: int
    reason: Reason
    retry_in_s: float
    latency_s: float = 0.0


@dataclass
class ContextCompactedFrame(SystemFrame):
    """Pushed upstream after a summary was spliced into the shared context.

    A system frame, so an interruption does not drop it. It is informational: the splice
    has already happened when it is pushed.

    Parameters:
        message: The templated summary message now in the context.
        event: The compaction's figures.
    """

    message: dict = field(default_factory=dict)
    event: ContextCompactedEvent | None = None


_RENAMED = {
    "SummaryAppliedEvent": ("ContextCompactedEvent", " (Pipecat has its own SummaryAppliedEvent)"),
    "ContextSummaryAppliedFrame": ("ContextCompactedFrame", ""),
}


def __getattr__(name: str) -> object:
    """The names renamed in 0.2, for one release, with a ``DeprecationWarning``."""
    renamed = _RENAMED.get(name)
    if renamed is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new, why = renamed
    warnings.warn(
        f"{name} is deprecated: use {new}{why}",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]
