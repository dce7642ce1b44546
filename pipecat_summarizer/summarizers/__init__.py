"""Summarizer backends behind one small protocol."""

from pipecat_summarizer.summarizers.base import Summarizer, SummarizerError, SummaryResult
from pipecat_summarizer.summarizers.extractive import ExtractiveLLMService, ExtractiveSummarizer
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
]
