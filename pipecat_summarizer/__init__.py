"""Background context summarization for Pipecat voice agents.

A drop-in frame processor that summarizes older turns on a cheap secondary LLM, in the
background, and splices the summary into the shared context without delaying a reply or
losing a message. Configured with Pipecat's own ``LLMAutoContextSummarizationConfig``.
"""

from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer.events import (
    ContextSummaryAppliedFrame,
    MessagesEvictedEvent,
    SummaryAppliedEvent,
    SummaryFailedEvent,
)
from pipecat_summarizer.processor import ContextSummarizer, SummarizerOptions
from pipecat_summarizer.prompt import DEFAULT_PROMPT, SummaryRequest
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
from pipecat_summarizer.tools import register_remember_fact

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PROMPT",
    "ContextSummarizer",
    "ContextSummaryAppliedFrame",
    "EstimateTokenCounter",
    "ExtractiveLLMService",
    "ExtractiveSummarizer",
    "LLMAutoContextSummarizationConfig",
    "LLMContextSummaryConfig",
    "MessagesEvictedEvent",
    "OpenAISummarizer",
    "PipecatLLMSummarizer",
    "SummarizerOptions",
    "SummaryAppliedEvent",
    "SummaryFailedEvent",
    "SummaryRequest",
    "SummaryResult",
    "Summarizer",
    "SummarizerError",
    "TokenCounter",
    "TokenizerCounter",
    "register_remember_fact",
]
