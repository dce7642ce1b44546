"""Summarizer backends behind one small protocol."""

from pipecat_summarizer.summarizers.base import Summarizer, SummarizerError
from pipecat_summarizer.summarizers.openai import OpenAISummarizer
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer

__all__ = ["OpenAISummarizer", "PipecatLLMSummarizer", "Summarizer", "SummarizerError"]
