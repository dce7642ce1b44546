"""Summarizer backends behind one small protocol.

Also the offline stand-ins: :class:`ExtractiveLLMService` (the extractive summarizer as a
Pipecat ``LLMService``) and :func:`offline_llm_settings`, the settings an ``LLMService`` that
calls no provider is built with (the replay's stand-in LLMs, examples/text_chat.py).
"""

from pipecat_summarizer.summarizers.base import (
    Summarizer,
    SummarizerError,
    SummaryResult,
    SummaryUsage,
)
from pipecat_summarizer.summarizers.extractive import (
    ExtractiveLLMService,
    ExtractiveSummarizer,
    offline_llm_settings,
)
from pipecat_summarizer.summarizers.openai import OpenAISummarizer
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer

__all__ = [
    "ExtractiveLLMService",
    "ExtractiveSummarizer",
    "OpenAISummarizer",
    "PipecatLLMSummarizer",
    "Summarizer",
    "SummarizerError",
    "SummaryResult",
    "SummaryUsage",
    "offline_llm_settings",
]
