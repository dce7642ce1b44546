"""Background context summarization for Pipecat voice agents.

A drop-in frame processor that summarizes older turns on a cheap secondary LLM, in the
background, and splices the summary into the shared context without delaying a reply or
losing a message. Configured with Pipecat's own ``LLMAutoContextSummarizationConfig`` plus
:class:`ContextSummarizerParams`.

Names renamed in 0.2 (``SummarizerOptions``, ``SummaryAppliedEvent``) still import, with a
``DeprecationWarning``, for one release: see the CHANGELOG's "Renamed" table.
"""

import warnings

from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer.events import (
    ContextCompactedEvent,
    ContextSummaryAppliedFrame,
    MessagesEvictedEvent,
    Reason,
    SummaryFailedEvent,
)
from pipecat_summarizer.guard import LLMRequestGuard
from pipecat_summarizer.memory import ConversationMemory
from pipecat_summarizer.options import (
    CeilingParams,
    ContextSummarizerParams,
    PinningParams,
    RetryParams,
    TriggerParams,
)
from pipecat_summarizer.pinned import Fact, Kind, Source
from pipecat_summarizer.processor import ContextSummarizer, SummarizerOptions
from pipecat_summarizer.prompt import DEFAULT_PROMPT, SummaryRequest
from pipecat_summarizer.recall import RecallParams
from pipecat_summarizer.semantic import SemanticRecall
from pipecat_summarizer.store.recorder import MemoryOptions
from pipecat_summarizer.summarizers import (
    ExtractiveLLMService,
    ExtractiveSummarizer,
    OpenAISummarizer,
    PipecatLLMSummarizer,
    Summarizer,
    SummarizerError,
    SummaryResult,
)
from pipecat_summarizer.tokens import EstimateTokenCounter, TokenCounter, TokenizerCounter
from pipecat_summarizer.tools import (
    recall_memory_flows_function,
    register_recall_memory,
    register_remember_fact,
    remember_fact_flows_function,
)

__version__ = "0.1.0"

# grouped by role; the imports above are sorted by module
__all__ = [
    # the processor and its companion
    "ContextSummarizer",
    "LLMRequestGuard",
    # configuration
    "CeilingParams",
    "ContextSummarizerParams",
    "LLMAutoContextSummarizationConfig",
    "LLMContextSummaryConfig",
    "MemoryOptions",
    "PinningParams",
    "RecallParams",
    "RetryParams",
    "SemanticRecall",  # RecallParams(semantic=...): the optional 'semantic' extra
    "TriggerParams",
    "SummarizerOptions",  # deprecated: ContextSummarizerParams
    # summarizer backends
    "DEFAULT_PROMPT",
    "ExtractiveLLMService",
    "ExtractiveSummarizer",
    "OpenAISummarizer",
    "PipecatLLMSummarizer",
    "Summarizer",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    # token counting
    "EstimateTokenCounter",
    "TokenCounter",
    "TokenizerCounter",
    # events
    "ContextCompactedEvent",
    "ContextSummaryAppliedFrame",
    "MessagesEvictedEvent",
    "Reason",
    "SummaryFailedEvent",
    # memory types
    "ConversationMemory",
    "Fact",
    "Kind",
    "Source",
    # tools (recall_memory reads the store; the *_flows_function forms are for Pipecat Flows)
    "recall_memory_flows_function",
    "register_recall_memory",
    "register_remember_fact",
    "remember_fact_flows_function",
]

_RENAMED = {"SummaryAppliedEvent": "ContextCompactedEvent"}


def __getattr__(name: str) -> object:
    """Names renamed in 0.2, for one release, with a ``DeprecationWarning``."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
    return globals()[new]
