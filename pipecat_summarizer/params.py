"""Every parameter group of the package, in Pipecat's manner: plain dataclasses named
``*Params``, nested by feature.

``ContextSummarizerParams`` holds what every call needs, with one nested params object per
feature (``trigger``, ``retry``, ``pinning``, and the optional ``ceiling``). The durable
memory across calls and recall come through the processor's own arguments:
``memory=MemoryParams(writer=WriterParams(...))`` (how a call uses its store) and
``recall=RecallParams(semantic=SemanticRecallParams(...))``.

Every field has a safe default and is validated at construction (numbers by annotation, see
:mod:`pipecat_summarizer._validation`), so a bad value fails here, named, not mid-call. A
params object holds settings and does no work: no model is loaded, no store opened, and this
module imports neither Pipecat nor numpy (the features that use the params import them).

``SummarizerOptions``, the flat form of 0.1, still works for one release: it warns
(``DeprecationWarning``) and is converted with :meth:`SummarizerOptions.to_params`.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from pipecat_summarizer._validation import validate_numeric_fields
from pipecat_summarizer.errors import SEMANTIC_EXTRA_HINT

if TYPE_CHECKING:
    from pipecat_summarizer._recall.embedding import Embedder
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
        if self.token_counter is not None:
            self.token_counter = _as_token_counter(self.token_counter)


# -- the store, recall and semantic recall: ContextSummarizer(memory=..., recall=...) ----------

#: The shortest flush interval of the store's writer (a smaller one would spin the event loop).
MIN_FLUSH_INTERVAL_S = 0.01


@dataclass
class WriterParams:
    """How the store's writer queues and flushes (``MemoryParams(writer=...)``).

    Parameters:
        max_queue: Records that may wait; beyond it the oldest is dropped.
        flush_interval_s: Seconds between flushes (the most a killed process loses); at
            least ``MIN_FLUSH_INTERVAL_S`` (0.01).
        batch_size: Records per transaction.
        max_backoff_s: Cap on the wait between retries while the database is down.
        write_timeout_s: A write that takes longer counts as an outage (its records stay
            queued, and the next attempt waits for it to settle first: writes are
            idempotent, so a late commit does no harm).
    """

    max_queue: int = 10_000
    flush_interval_s: float = 1.0
    batch_size: int = 500
    max_backoff_s: float = 30.0
    write_timeout_s: float = 10.0

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self)
        if self.max_queue < 1 or self.batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        if self.flush_interval_s <= 0 or self.max_backoff_s <= 0 or self.write_timeout_s <= 0:
            raise ValueError("flush_interval_s, max_backoff_s and write_timeout_s must be > 0")
        if self.flush_interval_s < MIN_FLUSH_INTERVAL_S:
            raise ValueError(
                f"flush_interval_s must be at least {MIN_FLUSH_INTERVAL_S} "
                f"(got {self.flush_interval_s!r}: a shorter interval spins the event loop)"
            )


@dataclass
class MemoryParams:
    """How a call uses the durable memory, its store (``ContextSummarizer(memory=...)``).

    Parameters:
        resume: Start a known caller's call (``user_id`` set) with their pinned facts and an
            "earlier calls" summary from the store. ``False`` records only.
        earlier_calls_tokens: Token budget of the "earlier calls" summary.
        max_earlier_calls: Most earlier calls whose summaries are considered.
        load_timeout_s: No frame ever waits for the caller's memory: it loads in the
            background and joins the context at the first frame after it arrives, if it
            arrives within this many seconds of the start of the call; later, it is not
            applied (the call has gone on without it) and one WARNING says so.
        flush_timeout_s: ``EndFrame``/``CancelFrame`` wait at most this long for the queue
            to be written.
        writer: Queue size, flush interval (default 1 s) and retry settings.
    """

    resume: bool = True
    earlier_calls_tokens: int = 300
    max_earlier_calls: int = 5
    load_timeout_s: float = 30.0
    flush_timeout_s: float = 3.0
    writer: WriterParams = field(default_factory=WriterParams)

    def __post_init__(self):
        """Validate the fields."""
        if not isinstance(self.resume, bool):
            raise TypeError(f"resume must be True or False, got {type(self.resume).__name__}")
        validate_numeric_fields(self)
        if self.earlier_calls_tokens < 0 or self.max_earlier_calls < 0:
            raise ValueError("earlier_calls_tokens and max_earlier_calls must not be negative")
        if self.load_timeout_s < 0 or self.flush_timeout_s < 0:
            raise ValueError("load_timeout_s and flush_timeout_s must not be negative")
        if not isinstance(self.writer, WriterParams):
            raise TypeError("writer must be a WriterParams")


@dataclass
class SemanticRecallParams:
    """Semantic recall: ``RecallParams(semantic=SemanticRecallParams())``.

    Settings only: the model is built where it is used (by the call's semantic index, which
    loads it in a worker thread the first time it embeds), one per process, shared by every
    call. To have it ready before the first call, call
    :func:`~pipecat_summarizer.load_semantic_model` at the application's start.

    Parameters:
        min_similarity: Least cosine similarity of a message and the query for it to be
            recalled without sharing the query's words: on LoCoMo 0.25 did best of 0.2-0.35
            with the default block, 0.2 with ``RecallParams.broad()``, whose larger block has
            room for the looser matches (benchmarks/README.md).
        candidates: Messages taken from the semantic ranking each turn (after the lexical
            hits).
        max_calls: The caller's most recent calls whose messages are embedded.
        embedder: The model: anything with ``embed(texts)`` returning unit-length float32
            rows. ``None`` (the default): WordLlama, one per process.

    Raises:
        ImportError: Without ``embedder``, if the ``semantic`` extra is not installed (checked
            here, so a missing extra fails at construction, not mid-call).
    """

    min_similarity: float = 0.25
    candidates: int = 30
    max_calls: int = 50
    embedder: Embedder | None = field(default=None, repr=False)

    def __post_init__(self):
        """Validate the fields (each error names its field)."""
        validate_numeric_fields(self, "recall.semantic.")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError("recall.semantic.min_similarity must be between -1 and 1")
        for name in ("candidates", "max_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"recall.semantic.{name} must be at least 1")
        if self.embedder is None:
            if importlib.util.find_spec("wordllama") is None:
                raise ImportError(SEMANTIC_EXTRA_HINT)
        elif not callable(getattr(self.embedder, "embed", None)):
            raise TypeError(
                "recall.semantic.embedder must have embed(texts) -> array, "
                f"got {type(self.embedder).__name__}"
            )


@dataclass
class RecallParams:
    """How recall works (``ContextSummarizer(..., recall=RecallParams())``; needs a store).

    Parameters:
        enabled: Recall on each user turn. ``False`` keeps the ``recall_memory`` tool only.
        max_tokens: Budget of the recalled message (header and quotes included).
        max_snippets: Most snippets in it.
        min_score: Least relevance for a snippet: the share of the query's topic words it
            contains (0..1, the same scale on every backend; the backend's own rank only
            orders the hits). A snippet must also contain two of them when the query has
            three or more: one shared word ("open") is not a strong match.
        latency_budget_s: How long the turn waits for the archive's answer. Later, the turn
            goes without recall, and the late answer may serve the next turn if it is still
            relevant to that turn's query.
        search_limit: Hits asked of the archive before filtering.
        max_snippet_tokens: Longest single snippet; a longer message is cut to a window around
            the query's words.
        max_question_words: The assistant's last question joins the query when it has at
            most this many words (``"Which hotel was that?"``); 0 never.
        tool_timeout_s: How long a ``recall_memory`` tool call waits for the archive.
        fill: Fill the block, after the strong matches, with the archive's next hits that
            share at least one of the query's topic words (in the archive's ranking), when
            there is a strong match. ``False``: strong matches only.
        semantic: Semantic recall as well (:class:`SemanticRecallParams`, the ``semantic``
            extra): archived messages that say the same in other words, fused with the
            lexical hits. ``None``: lexical only.
    """

    enabled: bool = True
    max_tokens: int = 800
    max_snippets: int = 8
    min_score: float = 0.3
    latency_budget_s: float = 0.010
    search_limit: int = 30
    max_snippet_tokens: int = 120
    max_question_words: int = 20
    tool_timeout_s: float = 2.0
    fill: bool = True
    semantic: SemanticRecallParams | None = None

    @classmethod
    def broad(cls, semantic: SemanticRecallParams | None = None, **overrides: Any) -> RecallParams:
        """A larger recalled block: up to 3,500 tokens, 35 snippets, 70 hits searched.

        The defaults (800 tokens, 8 snippets) keep every turn's request small; this preset
        trades input tokens for recall when callers often come back to details said long
        ago. Measured on LoCoMo at question time (benchmarks/README.md), answer recall and
        input against the full buffer's: lexical recall 79.6% at 11.8% with the defaults,
        83.8% at 17.0% with this preset; with ``semantic=SemanticRecallParams()`` 85.1% at
        18.1%, with ``SemanticRecallParams(min_similarity=0.2)`` 85.6% at 19.0% (the full
        buffer: 90.8%). The block is filled only as far as matches go, so a turn that
        matches little costs little more than with the defaults.

        Args:
            semantic: Semantic recall as well (see ``semantic``);
                ``SemanticRecallParams(min_similarity=0.2)`` did best with this block.
            **overrides: Any other field (``latency_budget_s=0.02``, ...).

        Returns:
            The params (validated like any other).
        """
        fields: dict[str, Any] = {"max_tokens": 3500, "max_snippets": 35, "search_limit": 70}
        return cls(**{**fields, "semantic": semantic, **overrides})

    def __post_init__(self):
        """Validate the fields (each error names its field)."""
        validate_numeric_fields(self, "recall.")
        if self.semantic is not None and not isinstance(self.semantic, SemanticRecallParams):
            raise TypeError(
                "recall.semantic must be a SemanticRecallParams, "
                f"got {type(self.semantic).__name__}"
            )
        for name in ("enabled", "fill"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"recall.{name} must be a bool")
        for name in ("max_tokens", "max_snippets", "search_limit", "max_snippet_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"recall.{name} must be at least 1")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError("recall.min_score must be between 0 and 1")
        if self.latency_budget_s < 0 or self.tool_timeout_s <= 0:
            raise ValueError("recall.latency_budget_s must be >= 0 and tool_timeout_s > 0")
        if self.max_question_words < 0:
            raise ValueError("recall.max_question_words must not be negative")
        if self.max_tokens < 40:
            raise ValueError("recall.max_tokens must be at least 40 (the header alone is ~25)")


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
