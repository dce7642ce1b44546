"""Background context summarization for Pipecat voice agents.

A drop-in frame processor that summarizes older turns on a cheap secondary LLM, in the
background, and splices the summary into the shared context without delaying a reply or
losing a message. Configured with Pipecat's own ``LLMAutoContextSummarizationConfig`` plus
:class:`ContextSummarizerParams`.

``__all__`` is the user API (pinned by ``tests/package/test_public_api.py``). The names are
loaded on first use, so importing a submodule (the ``pipecat-summarizer`` command's parser,
the errors) does not import Pipecat; ``from pipecat_summarizer import ContextSummarizer``
works as usual. Every error the library raises derives from :class:`PipecatSummarizerError`
(the tree is drawn in :mod:`pipecat_summarizer.errors`).

Every parameter group is in :mod:`pipecat_summarizer.params`, each named ``*Params`` as in
Pipecat. "Memory" means one thing, the durable memory across calls (the store,
:class:`MemoryParams`, ``recall_memory``); what the model sees besides the turns is the
:class:`ConversationRecord`.

Names renamed in 0.2 (``SummarizerOptions``, ``SummaryAppliedEvent``,
``ContextSummaryAppliedFrame``, ``MemoryOptions``, ``WriterOptions``, ``SemanticRecall``,
``ConversationMemory``) still import, with a ``DeprecationWarning``, for one release; they
are not in ``__all__``: see the CHANGELOG's "Renamed" table. So does
``ExtractiveLLMService``, a helper of the replay that left the top level: import it from
:mod:`pipecat_summarizer.summarizers`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the real imports, for type checkers and IDEs; at run time see _EXPORTS
    from pipecat.utils.context.llm_context_summarization import (
        LLMAutoContextSummarizationConfig,
        LLMContextSummaryConfig,
    )

    from pipecat_summarizer._compaction.calibration import TokenCalibrationReport
    from pipecat_summarizer._compaction.prompt import DEFAULT_PROMPT, SummaryRequest
    from pipecat_summarizer._recall.embedding import load_semantic_model
    from pipecat_summarizer._recall.hooks import RecallObserver, RecallOutcome
    from pipecat_summarizer._recall.prefetch import RecallPrefetch
    from pipecat_summarizer._recall.render import is_recall_message
    from pipecat_summarizer._record.pinned import Fact, Kind, Source
    from pipecat_summarizer._record.record import ConversationRecord
    from pipecat_summarizer._text.tokens import (
        EstimateTokenCounter,
        TokenCounter,
        TokenizerCounter,
        message_texts,
    )
    from pipecat_summarizer.errors import PipecatSummarizerError
    from pipecat_summarizer.events import (
        ContextCompactedEvent,
        ContextCompactedFrame,
        MessagesEvictedEvent,
        Reason,
        SummaryFailedEvent,
        ToolResultsClearedEvent,
    )
    from pipecat_summarizer.guard import LLMRequestGuard
    from pipecat_summarizer.params import (
        CalibrationParams,
        CeilingParams,
        ClearingParams,
        ContextSummarizerParams,
        MemoryParams,
        PinningParams,
        RecallParams,
        RetryParams,
        SemanticRecallParams,
        TriggerParams,
        WriterParams,
    )
    from pipecat_summarizer.processor import ContextSummarizer
    from pipecat_summarizer.store.base import StoreError
    from pipecat_summarizer.summarizers import (
        ExtractiveSummarizer,
        OpenAISummarizer,
        PipecatLLMSummarizer,
        Summarizer,
        SummarizerError,
        SummaryResult,
        SummaryUsage,
    )
    from pipecat_summarizer.tools import (
        recall_memory_flows_function,
        register_recall_memory,
        register_remember_fact,
        remember_fact_flows_function,
    )

__version__ = "0.1.0"

# grouped by role; the test pins the sorted list
__all__ = [
    # the processor and its companion
    "ContextSummarizer",
    "LLMRequestGuard",
    "RecallPrefetch",  # placed before the user aggregator: recall starts on the caller's words
    "RecallObserver",  # processor.recall_step.add_observer(...): each recall's counts, no text
    "RecallOutcome",
    # configuration (every params group lives in pipecat_summarizer.params)
    "CalibrationParams",  # the estimate calibrated by the provider's reported usage
    "CeilingParams",
    "ClearingParams",  # old bulky tool results cleared, archived, recallable
    "ContextSummarizerParams",
    "LLMAutoContextSummarizationConfig",
    "LLMContextSummaryConfig",
    "MemoryParams",  # ContextSummarizer(memory=...): how a call uses its store
    "PinningParams",
    "RecallParams",
    "is_recall_message",  # which message of a request is the recalled block
    "RetryParams",
    "SemanticRecallParams",  # RecallParams(semantic=...): the optional 'semantic' extra
    "load_semantic_model",  # its model, loaded at the application's start
    "TriggerParams",
    "WriterParams",  # MemoryParams(writer=...)
    # summarizer backends (and what a custom one implements)
    "DEFAULT_PROMPT",
    "ExtractiveSummarizer",
    "OpenAISummarizer",
    "PipecatLLMSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "SummaryUsage",  # what the secondary LLM reported for a summary
    # errors (the tree is in pipecat_summarizer.errors)
    "PipecatSummarizerError",
    "StoreError",
    "SummarizerError",
    # token counting
    "EstimateTokenCounter",
    "TokenCounter",
    "TokenizerCounter",
    "message_texts",  # every piece of text a message carries: what a custom counter counts
    "TokenCalibrationReport",  # ContextSummarizer.token_calibration
    # events
    "ContextCompactedEvent",
    "ContextCompactedFrame",
    "MessagesEvictedEvent",
    "Reason",
    "SummaryFailedEvent",
    "ToolResultsClearedEvent",
    # what the model sees besides the turns: the record of pinned facts and the summary
    "ConversationRecord",
    "Fact",
    "Kind",
    "Source",
    # tools (recall_memory reads the store; the *_flows_function forms are for Pipecat Flows)
    "recall_memory_flows_function",
    "register_recall_memory",
    "register_remember_fact",
    "remember_fact_flows_function",
]

_LLM_CONTEXT_SUMMARIZATION = "pipecat.utils.context.llm_context_summarization"

# Where each public name lives: loaded on first access, so that importing the package (or
# one of its light submodules, like the command line's parser) does not import Pipecat,
# whose import takes about a second and logs a banner. Kept equal to the TYPE_CHECKING
# imports above by tests/package/test_public_api.py.
_EXPORTS: dict[str, str] = {
    "CalibrationParams": "pipecat_summarizer.params",
    "ClearingParams": "pipecat_summarizer.params",
    "RecallPrefetch": "pipecat_summarizer._recall.prefetch",
    "RecallObserver": "pipecat_summarizer._recall.hooks",
    "RecallOutcome": "pipecat_summarizer._recall.hooks",
    "SummaryUsage": "pipecat_summarizer.summarizers",
    "TokenCalibrationReport": "pipecat_summarizer._compaction.calibration",
    "ToolResultsClearedEvent": "pipecat_summarizer.events",
    "CeilingParams": "pipecat_summarizer.params",
    "ContextCompactedEvent": "pipecat_summarizer.events",
    "ContextSummarizer": "pipecat_summarizer.processor",
    "ContextSummarizerParams": "pipecat_summarizer.params",
    "ContextCompactedFrame": "pipecat_summarizer.events",
    "ConversationRecord": "pipecat_summarizer._record.record",
    "DEFAULT_PROMPT": "pipecat_summarizer._compaction.prompt",
    "EstimateTokenCounter": "pipecat_summarizer._text.tokens",
    "ExtractiveSummarizer": "pipecat_summarizer.summarizers",
    "Fact": "pipecat_summarizer._record.pinned",
    "Kind": "pipecat_summarizer._record.pinned",
    "LLMAutoContextSummarizationConfig": _LLM_CONTEXT_SUMMARIZATION,
    "LLMContextSummaryConfig": _LLM_CONTEXT_SUMMARIZATION,
    "LLMRequestGuard": "pipecat_summarizer.guard",
    "MemoryParams": "pipecat_summarizer.params",
    "MessagesEvictedEvent": "pipecat_summarizer.events",
    "OpenAISummarizer": "pipecat_summarizer.summarizers",
    "PinningParams": "pipecat_summarizer.params",
    "PipecatLLMSummarizer": "pipecat_summarizer.summarizers",
    "PipecatSummarizerError": "pipecat_summarizer.errors",
    "Reason": "pipecat_summarizer.events",
    "RecallParams": "pipecat_summarizer.params",
    "RetryParams": "pipecat_summarizer.params",
    "SemanticRecallParams": "pipecat_summarizer.params",
    "Source": "pipecat_summarizer._record.pinned",
    "StoreError": "pipecat_summarizer.store.base",
    "Summarizer": "pipecat_summarizer.summarizers",
    "SummarizerError": "pipecat_summarizer.summarizers",
    "SummaryFailedEvent": "pipecat_summarizer.events",
    "SummaryRequest": "pipecat_summarizer._compaction.prompt",
    "SummaryResult": "pipecat_summarizer.summarizers",
    "TokenCounter": "pipecat_summarizer._text.tokens",
    "TokenizerCounter": "pipecat_summarizer._text.tokens",
    "message_texts": "pipecat_summarizer._text.tokens",
    "is_recall_message": "pipecat_summarizer._recall.render",
    "TriggerParams": "pipecat_summarizer.params",
    "WriterParams": "pipecat_summarizer.params",
    "load_semantic_model": "pipecat_summarizer._recall.embedding",
    "recall_memory_flows_function": "pipecat_summarizer.tools",
    "register_recall_memory": "pipecat_summarizer.tools",
    "register_remember_fact": "pipecat_summarizer.tools",
    "remember_fact_flows_function": "pipecat_summarizer.tools",
}

# Old top-level name -> (where it lives now, the message of its DeprecationWarning), one release.
_DEPRECATED: dict[str, tuple[str, str, str]] = {
    "SummarizerOptions": (
        "pipecat_summarizer.params",
        "SummarizerOptions",
        "SummarizerOptions is deprecated: use ContextSummarizerParams",
    ),
    "MemoryOptions": (
        "pipecat_summarizer.params",
        "MemoryParams",
        "MemoryOptions is deprecated: use MemoryParams",
    ),
    "WriterOptions": (
        "pipecat_summarizer.params",
        "WriterParams",
        "WriterOptions is deprecated: use WriterParams",
    ),
    "SemanticRecall": (  # a SemanticRecallParams that keeps its 0.2 load() method
        "pipecat_summarizer._recall.embedding",
        "SemanticRecall",
        "SemanticRecall is deprecated: use SemanticRecallParams",
    ),
    "ConversationMemory": (
        "pipecat_summarizer._record.record",
        "ConversationRecord",
        "ConversationMemory is deprecated: use ConversationRecord",
    ),
    "SummaryAppliedEvent": (
        "pipecat_summarizer.events",
        "ContextCompactedEvent",
        "SummaryAppliedEvent is deprecated: use ContextCompactedEvent",
    ),
    "ContextSummaryAppliedFrame": (
        "pipecat_summarizer.events",
        "ContextCompactedFrame",
        "ContextSummaryAppliedFrame is deprecated: use ContextCompactedFrame",
    ),
    "ExtractiveLLMService": (
        "pipecat_summarizer.summarizers",
        "ExtractiveLLMService",
        "pipecat_summarizer.ExtractiveLLMService is deprecated: import it from "
        "pipecat_summarizer.summarizers (a helper of the replay, not of the public API)",
    ),
}


def __getattr__(name: str) -> object:
    """A public name, imported on first use; a deprecated one with a ``DeprecationWarning``."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this function
        return value
    old = _DEPRECATED.get(name)
    if old is not None:
        module, new, message = old
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the lazily loaded public ones included."""
    return sorted(set(globals()) | set(__all__))
