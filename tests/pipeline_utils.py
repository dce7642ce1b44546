"""Shared helpers for tests that drive real Pipecat pipelines."""

from __future__ import annotations

from pipecat.frames.frames import InterruptionFrame, LLMMessagesAppendFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer import ContextSummarizer


def main_llm(base_url: str, **settings) -> OpenAILLMService:
    """Pipecat's OpenAI service pointed at the local test server."""
    return OpenAILLMService(
        api_key="test-key",
        base_url=base_url,
        settings=OpenAILLMService.Settings(model="main-model", **settings),
    )


def build(context: LLMContext, summarizer: ContextSummarizer, llm) -> Pipeline:
    """user aggregator -> summarizer -> main LLM -> assistant aggregator."""
    pair = LLMContextAggregatorPair(context)
    return Pipeline([pair.user(), summarizer, llm, pair.assistant()])


def user_turn(text: str) -> LLMMessagesAppendFrame:
    """A user turn that makes the user aggregator push a context frame."""
    return LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True)


def turns(texts: list[str], gap: float = 0.3, interrupt: bool = False) -> list:
    """Frames for a sequence of user turns, each followed by a pause (and a barge-in)."""
    frames: list = []
    for text in texts:
        frames.append(user_turn(text))
        frames.append(SleepFrame(sleep=gap))
        if interrupt:
            frames.append(InterruptionFrame())
    return frames


def texts_of(messages: list) -> str:
    """Every message's content joined, for 'is it still somewhere' checks."""
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
