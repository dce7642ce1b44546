"""Configuration mix-ups fail at construction with the right field named: a bool where a
number belongs, a string where a bool belongs, a service that cannot summarize."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import LLMSummarizeContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer import (
    ContextSummarizer,
    ContextSummarizerParams,
    OpenAISummarizer,
    PinningParams,
    SummarizerOptions,
    TriggerParams,
)
from tests.support.pipeline_utils import Run, cfg, turns


class AsyncSummarizer:
    async def summarize(self, request):
        return "FACTS:\n- x"


def build(config=None, summarizer=None, params=None):
    return ContextSummarizer(
        context=LLMContext(),
        config=config if config is not None else cfg(),
        summarizer=summarizer if summarizer is not None else AsyncSummarizer(),
        params=params,
    )


def realtime() -> OpenAIRealtimeLLMService:
    """A real Pipecat LLMService without run_inference (speech-to-speech: no one-shot calls)."""
    return OpenAIRealtimeLLMService(api_key="test-key")


def test_a_bool_max_context_tokens_is_refused_naming_max_context_tokens():
    # Pipecat's own __post_init__ turns True into target_context_tokens=0 first
    config = LLMAutoContextSummarizationConfig(max_context_tokens=True)
    with pytest.raises(TypeError) as caught:
        build(config)
    message = str(caught.value)
    assert message.startswith("max_context_tokens"), message
    assert "target_context_tokens must be positive" not in message


def test_a_max_context_tokens_pipecat_cuts_to_a_zero_target_is_named():
    with pytest.raises(ValueError, match=r"^max_context_tokens must be at least 2"):
        build(LLMAutoContextSummarizationConfig(max_context_tokens=1))
    build(LLMAutoContextSummarizationConfig(max_context_tokens=2))  # a target of 1 is fine


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TriggerParams(auto="no"), "trigger.auto"),
        (lambda: TriggerParams(auto=0), "trigger.auto"),
        (lambda: PinningParams(from_summaries="false"), "pinning.from_summaries"),
        (lambda: PinningParams(from_evicted=None), "pinning.from_evicted"),
        (lambda: ContextSummarizerParams(log_content="no"), "log_content"),
        (lambda: ContextSummarizerParams(protect_injected_system=1), "protect_injected_system"),
        (lambda: SummarizerOptions(auto_summarize="off"), "auto_summarize"),
        (lambda: SummarizerOptions(pin_evicted_facts="no"), "pin_evicted_facts"),
        (lambda: OpenAISummarizer(structured="no"), "structured"),
    ],
)
@pytest.mark.filterwarnings("ignore:SummarizerOptions is deprecated:DeprecationWarning")
def test_a_flag_given_anything_but_a_bool_is_refused_with_the_field_named(make, field):
    with pytest.raises(TypeError, match=rf"^{field} must be True or False"):
        make()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TriggerParams(min_token_gain=True), "trigger.min_token_gain"),
        (lambda: ContextSummarizerParams(max_summary_input_tokens=True), "max_summary_input"),
        (lambda: ContextSummarizerParams(unresolved_tool_call_turns=False), "unresolved_tool"),
        (lambda: PinningParams(budget_tokens=True), "pinning.budget_tokens"),
    ],
)
def test_a_bool_where_a_number_belongs_is_refused_with_the_field_named(make, field):
    with pytest.raises(TypeError, match=rf"^{field}"):
        make()


def test_flags_given_as_bools_still_pass():
    TriggerParams(auto=False)
    PinningParams(from_summaries=False, from_evicted=False)
    ContextSummarizerParams(log_content=True, protect_injected_system=False)
    OpenAISummarizer(structured=True, base_url="http://127.0.0.1:9/v1")


def test_a_service_without_run_inference_is_refused_at_construction_naming_it():
    with pytest.raises(
        TypeError, match="OpenAIRealtimeLLMService does not implement run_inference"
    ):
        build(summarizer=realtime())


def test_a_service_without_run_inference_in_the_summary_config_is_refused_naming_the_field():
    config = cfg(llm=realtime())
    with pytest.raises(TypeError, match=r"^summary_config\.llm: OpenAIRealtimeLLMService"):
        ContextSummarizer(context=LLMContext(), config=config)


async def test_a_manual_override_with_such_a_service_falls_back_without_breaking_the_call(
    openai_server, logs
):
    r = Run(openai_server, cfg(messages=50, keep=1))
    frames = turns([f"user message number {i}" for i in range(4)], gap=2.0)
    override = LLMContextSummaryConfig(llm=realtime())
    # settled pauses: the manual summary applies before the end (a 0.3 s cap ran out under load)
    await r.run([*frames, LLMSummarizeContextFrame(config=override), *turns(["last"], gap=3.0)])
    assert any(
        "OpenAIRealtimeLLMService does not implement run_inference" in rec["message"]
        for rec in logs
    )
    assert r.applied, "the manual request ran with the processor's own config"
    assert "last" in str(r.context.messages[-2:])
