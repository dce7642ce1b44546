"""Summaries' own usage: read from the secondary LLM's response by both backends (against the
local OpenAI-protocol server), the provider shapes, and the Pipecat metrics frame it becomes."""

from __future__ import annotations

from types import SimpleNamespace

from pipecat.frames.frames import MetricsFrame
from pipecat.metrics.metrics import LLMUsageMetricsData

from pipecat_summarizer import OpenAISummarizer, PipecatLLMSummarizer
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.events import ContextCompactedEvent
from pipecat_summarizer.summarizers.base import SummaryResult, SummaryUsage, as_result, usage_of
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import main_llm

REQUEST = build_request(
    [{"role": "user", "content": "I'm allergic to peanuts."}], previous_summary=None, max_tokens=200
)
USAGE = {
    "prompt_tokens": 410,
    "completion_tokens": 37,
    "total_tokens": 447,
    "prompt_tokens_details": {"cached_tokens": 256},
}


async def test_openai_summarizer_reads_the_responses_usage(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- peanut allergy", usage=USAGE)
    s = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    result = as_result(await s.summarize(REQUEST))  # the processor's route: usage kept
    await s.aclose()
    assert result.text == "FACTS:\n- peanut allergy"
    assert result.usage == SummaryUsage(410, 37, 256)


async def test_structured_output_keeps_the_usage(openai_server):
    record = (
        '{"facts": ["peanut allergy"], "constraints": [], "decisions": [], "open_questions": []}'
    )
    openai_server.handler = lambda body: Reply(record, usage=USAGE)
    s = OpenAISummarizer(base_url=openai_server.base_url, model="cheap", structured=True)
    result = await s.summarize(REQUEST)
    await s.aclose()
    assert isinstance(result, SummaryResult) and result.sections is not None
    assert result.usage == SummaryUsage(410, 37, 256)


async def test_pipecat_llm_summarizer_reads_the_usage_pipecat_observes(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- via pipecat", usage=USAGE)
    result = as_result(
        await PipecatLLMSummarizer(main_llm(openai_server.base_url)).summarize(REQUEST)
    )
    assert result.text == "FACTS:\n- via pipecat"
    assert result.usage == SummaryUsage(410, 37, 256)


def test_usage_shapes_openai_anthropic_and_none():
    assert usage_of({"usage": {"prompt_tokens": 5, "completion_tokens": 2}}) == SummaryUsage(5, 2)
    anthropic = SimpleNamespace(
        usage=SimpleNamespace(
            input_tokens=100,
            output_tokens=20,
            cache_read_input_tokens=900,
            cache_creation_input_tokens=50,
        )
    )
    assert usage_of(anthropic) == SummaryUsage(1050, 20, 900)  # gross of the cache
    assert usage_of({"choices": []}) is None
    assert usage_of({"usage": {"prompt_tokens": "many", "completion_tokens": 2}}) is None


def test_the_usage_becomes_pipecats_usage_metrics_and_the_events_fields():
    result = SummaryResult("FACTS:\n- x", None, SummaryUsage(410, 37, 256))
    frame = result.usage_frame("ContextSummarizer#0", OpenAISummarizer(model="cheap"))
    assert isinstance(frame, MetricsFrame)
    (data,) = frame.data
    assert isinstance(data, LLMUsageMetricsData)
    assert (data.processor, data.model) == ("ContextSummarizer#0", "cheap")
    assert (data.value.prompt_tokens, data.value.completion_tokens) == (410, 37)
    assert (data.value.total_tokens, data.value.cache_read_input_tokens) == (447, 256)
    assert SummaryResult("x").usage_frame("p", None) is None
    event = ContextCompactedEvent("messages", 10, 5, 6, 4, 900, 400, 80, 700, 1.0, "abc", 1)
    assert result.with_usage(event).summary_cached_tokens == 256
    assert SummaryResult("x").with_usage(event) is event
    assert "summary_prompt_tokens=410" in result.with_usage(event).log_line()
