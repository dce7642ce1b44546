"""Shared helpers for tests that drive real Pipecat pipelines."""

from __future__ import annotations

import re

from pipecat.frames.frames import InterruptionFrame, LLMMessagesAppendFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.openai.llm import OpenAILLMService

from pipecat_summarizer import (
    ContextSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
    OpenAISummarizer,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.settle import Gap, run_settling


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


def lookup_tool_pipeline(server, config, *, guard: bool) -> Pipeline:
    """A pipeline whose context offers one tool, ``lookup`` (its handler answers
    ``{"status": "ok"}``): user aggregator -> summarizer -> main LLM -> (with ``guard``, the
    summarizer's companion) -> assistant aggregator."""
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema

    llm = main_llm(server.base_url)

    async def lookup(params):
        await params.result_callback({"status": "ok"})

    llm.register_function("lookup", lookup)
    context = LLMContext()
    schema = FunctionSchema(name="lookup", description="Look up.", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[schema]))
    summarizer = ContextSummarizer(
        context=context,
        config=config,
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
    )
    pair = LLMContextAggregatorPair(context)
    after = [summarizer.after_llm()] if guard else []
    return Pipeline([pair.user(), summarizer, llm, *after, pair.assistant()])


def user_turn(text: str) -> LLMMessagesAppendFrame:
    """A user turn that makes the user aggregator push a context frame."""
    return LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True)


def turns(texts: list[str], gap: float = 0.3, interrupt: bool = False) -> list:
    """Frames for a sequence of user turns, each followed by a pause (and a barge-in).

    The pause is a :class:`~tests.support.settle.Gap`: full length under ``run_test``,
    ended once the pipeline has settled under :meth:`Run.run`."""
    frames: list = []
    for text in texts:
        frames.append(user_turn(text))
        frames.append(Gap(sleep=gap))
        if interrupt:
            frames.append(InterruptionFrame())
    return frames


def texts_of(messages: list) -> str:
    """Every message's content joined, for 'is it still somewhere' checks."""
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


def user_texts(messages) -> list[str]:
    return [m["content"] for m in messages if isinstance(m, dict) and m.get("role") == "user"]


USER_LINE = re.compile(r"user message number \d+")


def echo_summary(body: dict) -> str:
    """A summarizer that keeps every 'user message number N' it was given (rolling too)."""
    seen = sorted(
        set(USER_LINE.findall(body["messages"][1]["content"])),
        key=lambda s: int(s.rsplit(" ", 1)[1]),
    )
    return "FACTS:\n" + "\n".join(f"- {s}" for s in seen)


def scripted(summary=echo_summary, delay=0.0, status=200):
    """Chat turns answer at once; summary requests are scripted."""

    def handler(body):
        if is_summary_request(body):
            text = summary(body) if callable(summary) else summary
            return Reply(text, delay=delay, status=status)
        return Reply("Sure thing.")

    return handler


def cfg(tokens=None, messages=8, keep=4, **summary):
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=tokens,
        max_unsummarized_messages=messages,
        summary_config=LLMContextSummaryConfig(min_messages_after_summary=keep, **summary),
    )


class Run:
    """One pipeline run: context, processor, events, and what the server saw."""

    def __init__(
        self,
        server,
        config,
        *,
        system="You are a helpful voice assistant.",
        options=None,
        summarizer="openai",
        llm_settings=None,
    ):
        self.server = server
        self.context = LLMContext(
            messages=[{"role": "system", "content": system}] if system else []
        )
        self.processor = ContextSummarizer(
            context=self.context,
            config=config,
            summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap")
            if summarizer == "openai"
            else summarizer,
            options=options,
        )
        self.applied, self.failed = [], []
        self.llm = main_llm(server.base_url, **(llm_settings or {}))

        @self.processor.event_handler("on_context_compacted")
        async def _applied(_, event):
            self.applied.append(event)

        @self.processor.event_handler("on_summary_failed")
        async def _failed(_, event):
            self.failed.append(event)

    async def run(self, frames, tail=0.3):
        pipeline = build(self.context, self.processor, self.llm)
        # each pause ends once the pipeline has settled
        down, up = await run_settling(pipeline, frames_to_send=[*frames, Gap(sleep=tail)])
        self.down, self.up = down, up
        return self
