"""The compaction's parameters: ``ContextSummarizerParams`` and its nested groups.

``ContextSummarizerParams`` holds what every call needs, with one nested params object per
feature (``trigger``, ``retry``, ``pinning``, and the optional ``ceiling``); the deprecated
flat ``SummarizerOptions`` of 0.1 converts to it. Import them from
:mod:`pipecat_summarizer.params`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from pipecat_summarizer._validation import validate_numeric_fields

if TYPE_CHECKING:
    from pipecat_summarizer._text.tokens import TokenCounter

SummaryRole = Literal["user", "assistant"]
AppFactsRole = Literal["developer", "system"]


@dataclass
class TriggerParams:
    """When a summary starts (besides manual requests and the ceiling's backlog).

    Parameters:
        auto: Summarize when Pipecat's thresholds trip. ``False`` is Pipecat's default mode
            (``enable_auto_context_summarization=False``): only manual
            ``LLMSummarizeContextFrame`` requests start a summary, plus the backlog of
            messages the ceiling evicted, which only a summary can bring back.
        soft_ratio: Start at this share of ``max_context_tokens``, so the summary usually
            lands before the threshold itself is reached (1.0 waits for it). The message
            threshold is not scaled.
        min_token_gain: A token-triggered compaction starts only if it would summarize at
            least this share of ``max_context_tokens``, so a context whose recent turns alone
            are large is not re-summarized every turn.
        cached_input_discount: The main LLM provider's prompt-cache discount, as a share of
            the input price (0.9 when a cached input token costs a tenth). Above 0, a
            compaction the message threshold calls for waits until carrying the unsummarized
            messages at the cached price has cost as much as rewriting the cached prefix
            would (``cadence.CacheCadence``); the token threshold
            is never deferred. 0 (the default) compacts on Pipecat's thresholds alone.
    """

    auto: bool = True
    soft_ratio: float = 0.8
    min_token_gain: float = 0.1
    cached_input_discount: float = 0.0

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "trigger.")
        check_flags(self, "trigger.")
        if not 0.1 <= self.soft_ratio <= 1:
            raise ValueError("trigger.soft_ratio must be in [0.1, 1]")
        if not 0 <= self.min_token_gain < 1:
            raise ValueError("trigger.min_token_gain must be in [0, 1)")
        if not 0 <= self.cached_input_discount < 1:
            raise ValueError("trigger.cached_input_discount must be in [0, 1)")


@dataclass
class RetryParams:
    """Backoff after a failed summary.

    Parameters:
        backoff_s: Wait after a failure before the next automatic attempt; doubled for each
            further failure in a row.
        max_backoff_s: Cap on that wait.
        error_after_failures: Failures in a row that produce the one ERROR log.
    """

    backoff_s: float = 5.0
    max_backoff_s: float = 120.0
    error_after_failures: int = 3

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "retry.")
        check_flags(self, "retry.")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("retry.backoff_s and retry.max_backoff_s must not be negative")
        if self.error_after_failures < 1:
            raise ValueError("retry.error_after_failures must be at least 1")


@dataclass
class PinningParams:
    """Pinned facts: kept in view every request, never summarized away.

    Parameters:
        budget_tokens: Token budget of the pinned facts (both messages). Over it, the least
            recently confirmed facts move into the summary; nothing is dropped.
        from_summaries: Pin the FACTS and CONSTRAINTS of every summary.
        from_evicted: When the ceiling evicts messages (no summary was ready), pin the
            salient facts found in them at once with the offline extractor, so an allergy
            stated before a summarizer outage stays in view until the backlog is summarized.
        app_role: Role of the message holding the facts the application pinned
            (``pin(..., source="app")``), the only facts rendered with authority.
            ``"developer"`` is what Pipecat recommends for supplementary guidance; adapters
            that lack the role send it as a user message. Facts from the conversation always
            go in a user-role message, as quoted data.
    """

    budget_tokens: int = 300
    from_summaries: bool = True
    from_evicted: bool = True
    app_role: AppFactsRole = "developer"

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "pinning.")
        check_flags(self, "pinning.")
        if self.budget_tokens < 20:
            raise ValueError("pinning.budget_tokens must be at least 20")
        if self.app_role not in ("system", "developer"):
            raise ValueError("pinning.app_role must be 'system' or 'developer'")


@dataclass
class CeilingParams:
    """A hard ceiling on what the main LLM receives.

    When a request would exceed it and no summary is ready, the oldest whole units move to a
    pending queue that the next summary consumes first; nothing is lost.

    Parameters:
        max_request_tokens: The ceiling, messages plus the LLM's ``system_instruction`` and
            tool schemas when known.
        eviction_target_ratio: Once over the ceiling, evict down to this share of it in one
            step, so the prefix stays stable for several turns and a tool call's follow-up
            has room.
    """

    max_request_tokens: int
    eviction_target_ratio: float = 0.75

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "ceiling.")
        check_flags(self, "ceiling.")
        if self.max_request_tokens < 200:
            raise ValueError("ceiling.max_request_tokens must be at least 200")
        if not 0.1 <= self.eviction_target_ratio <= 1:
            raise ValueError("ceiling.eviction_target_ratio must be in [0.1, 1]")


@dataclass
class CalibrationParams:
    """Calibrating the token estimate by the main LLM's reported usage.

    When the pipeline reports usage (``PipelineParams(enable_metrics=True,
    enable_usage_metrics=True)``) and the processor knows the main LLM (``after_llm()`` or
    ``llm=``), each report is matched with the estimate of its request, and the thresholds,
    the cache-aware cadence and the ceiling scale the estimate by the call's ratio (reported
    input / estimate). Without usage reports nothing changes.

    Parameters:
        enabled: Calibrate when usage is reported (``False``: the estimate alone, always).
        smoothing: Weight of each new sample in the moving average of the ratio (1: the
            latest sample alone).
        margin: Share added to the ceiling's scale, which is also the largest recent sample,
            so the ceiling holds while the ratio lags behind a change of content.
        min_ratio: Smallest sample taken (smaller ones are clipped to it).
        max_ratio: Largest sample taken (larger ones are clipped to it).
        window: Recent samples whose largest the ceiling's scale also covers.
    """

    enabled: bool = True
    smoothing: float = 0.3
    margin: float = 0.1
    min_ratio: float = 0.5
    max_ratio: float = 3.0
    window: int = 8

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "calibration.")
        check_flags(self, "calibration.")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"calibration.smoothing must be in (0, 1], got {self.smoothing}")
        if not 0 <= self.margin <= 1:
            raise ValueError(f"calibration.margin must be in [0, 1], got {self.margin}")
        if not 0 < self.min_ratio <= 1:
            raise ValueError(f"calibration.min_ratio must be in (0, 1], got {self.min_ratio}")
        if not 1 <= self.max_ratio <= 10:
            raise ValueError(f"calibration.max_ratio must be in [1, 10], got {self.max_ratio}")
        if self.window < 1:
            raise ValueError(f"calibration.window must be at least 1, got {self.window}")


@dataclass
class ClearingParams:
    """Lossless tool-result clearing: bulky tool results leave the context, not the memory.

    A cleared result keeps its message (the tool call and its result stay paired) with a short
    placeholder naming the tool; the original is archived verbatim in the store and comes back
    through per-turn recall or the ``recall_memory`` tool. Clearing is batched with
    compaction (no LLM call of its own): it runs when a compaction is applied, or instead of
    one when the token threshold trips and clearing alone brings the context under it.

    Parameters:
        keep_latest: The latest tool results never cleared (the ones the model is using).
        min_result_tokens: Only results over this many tokens are cleared.
        min_freed_tokens: Clear only when at least this many tokens are freed at once (each
            clearing rewrites the cached prefix).
        exclude_tools: Tool names whose results are never cleared (``recall_memory``'s never
            are).
        without_store: Allow clearing without a store: the cleared text is then gone, not
            archived. Without a store and without this, the processor refuses to start.
    """

    keep_latest: int = 3
    min_result_tokens: int = 150
    min_freed_tokens: int = 500
    exclude_tools: tuple[str, ...] = ()
    without_store: bool = False

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self, "clearing.")
        check_flags(self, "clearing.")
        for name in ("keep_latest", "min_result_tokens", "min_freed_tokens"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"clearing.{name} must be >= 0, got {value}")
        tools = self.exclude_tools
        if isinstance(tools, str) or not isinstance(tools, (tuple, list, set, frozenset)):
            raise TypeError(
                f"clearing.exclude_tools must be a tuple of tool names, got {type(tools).__name__}"
            )
        for tool in tools:
            if not isinstance(tool, str) or not tool:
                raise TypeError(f"clearing.exclude_tools must hold tool names, got {tool!r:.40}")
        self.exclude_tools = tuple(tools)


def check_flags(obj: Any, prefix: str = "") -> None:
    """Reject a non-bool in any ``bool`` field of a dataclass instance, naming the field.

    ``auto="no"`` or ``log_content="false"`` is truthy and would silently mean yes, and
    ``0``/``1`` reads as a count someone meant elsewhere: only ``True`` and ``False`` pass.

    Raises:
        TypeError: If a ``bool`` field holds anything else.
    """
    for f in fields(obj):
        if f.type not in ("bool", bool):
            continue
        value = getattr(obj, f.name)
        if not isinstance(value, bool):
            raise TypeError(
                f"{prefix}{f.name} must be True or False, got {type(value).__name__} {value!r:.40}"
            )


def _as_token_counter(counter: Any) -> TokenCounter:
    # imported here: the token counters import Pipecat, and the params (which the store's
    # writer and the command line's parsers use) need not
    from pipecat_summarizer._text.tokens import as_token_counter

    return as_token_counter(counter)


def _check_group(name: str, value: Any, cls: type, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")


@dataclass
class ContextSummarizerParams:
    """Parameters of :class:`~pipecat_summarizer.ContextSummarizer` beyond Pipecat's config.

    Parameters:
        max_summary_input_tokens: Budget for what one summary request sends (previous
            summary and transcript). Whole units are taken oldest first; the rest waits for
            the next round. ``None`` for unbounded.
        token_counter: Per-message token counter; defaults to the Pipecat-compatible
            estimate. Pass ``TokenizerCounter(encoding)`` for exact counts; a raw tokenizer
            with ``encode()`` (a tiktoken ``Encoding``) is wrapped in it, anything else
            without ``count_message()`` is rejected with a ``TypeError``.
        protect_injected_system: Keep system/developer messages injected mid-call verbatim
            instead of summarizing them.
        unresolved_tool_call_turns: A tool call whose result has not arrived after this many
            user turns no longer holds back compaction: it is summarized as called, with no
            result. ``None`` waits forever.
        summary_role: Role of the summary message (Pipecat uses ``"user"``); never
            system/developer, which would pass the conversation off as instructions.
        log_content: Also log message, fact and error text, at DEBUG only. Lines at INFO
            and above never carry conversation or fact text, whatever this says.
        trigger: When summaries start.
        retry: Backoff after failures.
        pinning: Pinned facts.
        ceiling: The hard ceiling; ``None`` (the default) disables it.
        clearing: Lossless tool-result clearing; ``None`` (the default) disables it.
        calibration: Calibrating the estimate by the main LLM's reported usage (on by
            default; without usage reports nothing changes).

    Example::

        ContextSummarizerParams(
            ceiling=CeilingParams(max_request_tokens=6000),
            pinning=PinningParams(budget_tokens=400),
        )
    """

    max_summary_input_tokens: int | None = 8000
    token_counter: TokenCounter | None = None
    protect_injected_system: bool = True
    unresolved_tool_call_turns: int | None = 3
    summary_role: SummaryRole = "user"
    log_content: bool = False
    trigger: TriggerParams = field(default_factory=TriggerParams)
    retry: RetryParams = field(default_factory=RetryParams)
    pinning: PinningParams = field(default_factory=PinningParams)
    ceiling: CeilingParams | None = None
    clearing: ClearingParams | None = None
    calibration: CalibrationParams = field(default_factory=CalibrationParams)

    def __post_init__(self):
        """Validate the fields (the nested groups validate themselves)."""
        validate_numeric_fields(self)
        check_flags(self)
        if self.max_summary_input_tokens is not None and self.max_summary_input_tokens < 100:
            raise ValueError("max_summary_input_tokens must be at least 100 (or None)")
        if self.unresolved_tool_call_turns is not None and self.unresolved_tool_call_turns < 1:
            raise ValueError("unresolved_tool_call_turns must be at least 1 (or None)")
        if self.summary_role not in ("user", "assistant"):
            # a system/developer summary would be taken for part of the system prompt
            raise ValueError("summary_role must be 'user' or 'assistant'")
        _check_group("trigger", self.trigger, TriggerParams)
        _check_group("retry", self.retry, RetryParams)
        _check_group("pinning", self.pinning, PinningParams)
        _check_group("ceiling", self.ceiling, CeilingParams, optional=True)
        _check_group("clearing", self.clearing, ClearingParams, optional=True)
        _check_group("calibration", self.calibration, CalibrationParams)
        if self.token_counter is not None:
            self.token_counter = _as_token_counter(self.token_counter)


@dataclass
class SummarizerOptions:
    """Deprecated flat form of :class:`ContextSummarizerParams` (removed in the next
    release). Each field maps to a grouped one (see the CHANGELOG's "Renamed" table);
    :meth:`to_params` converts. Constructing it warns with a ``DeprecationWarning``.
    """

    max_summary_input_tokens: int | None = 8000
    token_counter: TokenCounter | None = None
    protect_injected_system: bool = True
    min_token_gain: float = 0.1
    retry_backoff_s: float = 5.0
    max_retry_backoff_s: float = 120.0
    error_after_failures: int = 3
    summary_role: str = "user"
    soft_trigger_ratio: float = 0.8
    max_request_tokens: int | None = None
    eviction_target_ratio: float = 0.75
    pinned_facts_tokens: int = 300
    pin_summary_facts: bool = True
    pin_evicted_facts: bool = True
    pinned_role: str = "developer"
    auto_summarize: bool = True
    log_content: bool = False
    unresolved_tool_call_turns: int | None = 3
    cached_input_discount: float = 0.0

    def __post_init__(self):
        """Warn, then validate under the old field names."""
        warnings.warn(
            "SummarizerOptions is deprecated: pass params=ContextSummarizerParams(...) "
            "(grouped: trigger, retry, pinning, ceiling); see the CHANGELOG",
            DeprecationWarning,
            stacklevel=3,
        )
        # every int/float field, by annotation: NaN, infinity, strings and bools fail here,
        # named, before the range checks below (which NaN would pass)
        validate_numeric_fields(self)
        check_flags(self)
        if self.max_summary_input_tokens is not None and self.max_summary_input_tokens < 100:
            raise ValueError("max_summary_input_tokens must be at least 100 (or None)")
        if not 0 <= self.min_token_gain < 1:
            raise ValueError("min_token_gain must be in [0, 1)")
        if self.retry_backoff_s < 0 or self.max_retry_backoff_s < 0:
            raise ValueError("retry backoff must not be negative")
        if self.error_after_failures < 1:
            raise ValueError("error_after_failures must be at least 1")
        if self.summary_role not in ("user", "assistant"):
            raise ValueError("summary_role must be 'user' or 'assistant'")
        if self.pinned_role not in ("system", "developer"):
            raise ValueError("pinned_role must be system or developer")
        if not 0.1 <= self.soft_trigger_ratio <= 1:
            raise ValueError("soft_trigger_ratio must be in [0.1, 1]")
        if not 0.1 <= self.eviction_target_ratio <= 1:
            raise ValueError("eviction_target_ratio must be in [0.1, 1]")
        if self.max_request_tokens is not None and self.max_request_tokens < 200:
            raise ValueError("max_request_tokens must be at least 200 (or None)")
        if self.pinned_facts_tokens < 20:
            raise ValueError("pinned_facts_tokens must be at least 20")
        if self.unresolved_tool_call_turns is not None and self.unresolved_tool_call_turns < 1:
            raise ValueError("unresolved_tool_call_turns must be at least 1 (or None)")
        if self.token_counter is not None:
            self.token_counter = _as_token_counter(self.token_counter)

    def to_params(self) -> ContextSummarizerParams:
        """The same settings as grouped :class:`ContextSummarizerParams`."""
        ceiling = None
        if self.max_request_tokens is not None:
            ceiling = CeilingParams(self.max_request_tokens, self.eviction_target_ratio)
        return ContextSummarizerParams(
            max_summary_input_tokens=self.max_summary_input_tokens,
            token_counter=self.token_counter,
            protect_injected_system=self.protect_injected_system,
            unresolved_tool_call_turns=self.unresolved_tool_call_turns,
            summary_role=self.summary_role,  # type: ignore[arg-type]  # checked above
            log_content=self.log_content,
            trigger=TriggerParams(
                self.auto_summarize,
                self.soft_trigger_ratio,
                self.min_token_gain,
                self.cached_input_discount,
            ),
            retry=RetryParams(
                self.retry_backoff_s, self.max_retry_backoff_s, self.error_after_failures
            ),
            pinning=PinningParams(
                self.pinned_facts_tokens,
                self.pin_summary_facts,
                self.pin_evicted_facts,
                self.pinned_role,  # type: ignore[arg-type]  # checked above
            ),
            ceiling=ceiling,
        )


def as_params(params: Any, options: Any = None) -> ContextSummarizerParams:
    """The processor's params from ``params=`` or the deprecated ``options=``.

    Raises:
        TypeError: If both are given, or either has the wrong type (the argument is named).
    """
    if params is not None and options is not None:
        raise TypeError("pass params= or the deprecated options=, not both")
    if options is not None:
        if not isinstance(options, SummarizerOptions):
            raise TypeError(f"options must be a SummarizerOptions, got {type(options).__name__}")
        return options.to_params()
    if params is None:
        return ContextSummarizerParams()
    if not isinstance(params, ContextSummarizerParams):
        raise TypeError(f"params must be a ContextSummarizerParams, got {type(params).__name__}")
    return params
