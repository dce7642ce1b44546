"""Params grouped by feature: safe defaults, validation naming the field, and the
deprecated flat ``SummarizerOptions`` mapped field by field."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import (
    CeilingParams,
    ContextSummarizer,
    ContextSummarizerParams,
    PinningParams,
    RetryParams,
    SummarizerOptions,
    TriggerParams,
)
from pipecat_summarizer.params import as_params
from tests.support.pipeline_utils import cfg


class AsyncSummarizer:
    async def summarize(self, request):
        return "FACTS:\n- x"


def test_defaults_are_the_flat_defaults():
    with pytest.warns(DeprecationWarning, match="ContextSummarizerParams"):
        flat = SummarizerOptions()
    assert flat.to_params() == ContextSummarizerParams()
    assert ContextSummarizerParams().ceiling is None  # the ceiling is opt-in


def test_every_flat_field_maps_to_a_grouped_one():
    changed = dict(
        max_summary_input_tokens=500,
        protect_injected_system=False,
        min_token_gain=0.2,
        retry_backoff_s=1.0,
        max_retry_backoff_s=9.0,
        error_after_failures=5,
        summary_role="assistant",
        soft_trigger_ratio=0.5,
        max_request_tokens=900,
        eviction_target_ratio=0.6,
        pinned_facts_tokens=77,
        pin_summary_facts=False,
        pin_evicted_facts=False,
        pinned_role="system",
        auto_summarize=False,
        log_content=True,
        unresolved_tool_call_turns=None,
    )
    with pytest.warns(DeprecationWarning):
        params = SummarizerOptions(**changed).to_params()
    assert params == dataclasses.replace(
        ContextSummarizerParams(),
        max_summary_input_tokens=500,
        protect_injected_system=False,
        summary_role="assistant",
        log_content=True,
        unresolved_tool_call_turns=None,
        trigger=dataclasses.replace(
            TriggerParams(), auto=False, soft_ratio=0.5, min_token_gain=0.2
        ),
        retry=RetryParams(backoff_s=1.0, max_backoff_s=9.0, error_after_failures=5),
        pinning=PinningParams(
            budget_tokens=77, from_summaries=False, from_evicted=False, app_role="system"
        ),
        ceiling=CeilingParams(max_request_tokens=900, eviction_target_ratio=0.6),
    )
    # every flat field was changed above, so none is silently dropped by to_params
    flat_fields = {f.name for f in dataclasses.fields(SummarizerOptions)} - {"token_counter"}
    assert flat_fields - set(changed) <= {"cached_input_discount"}


@pytest.mark.parametrize(
    "build, error, name",
    [
        (lambda: TriggerParams(soft_ratio=math.nan), ValueError, "trigger.soft_ratio"),
        (lambda: TriggerParams(soft_ratio=0.05), ValueError, "trigger.soft_ratio"),
        (lambda: TriggerParams(min_token_gain="0.1"), TypeError, "trigger.min_token_gain"),
        (lambda: RetryParams(backoff_s=-1), ValueError, "retry.backoff_s"),
        (lambda: RetryParams(error_after_failures=2.0), TypeError, "retry.error_after"),
        (lambda: PinningParams(budget_tokens=True), TypeError, "pinning.budget_tokens"),
        (lambda: PinningParams(app_role="user"), ValueError, "pinning.app_role"),
        (lambda: CeilingParams(max_request_tokens=math.inf), ValueError, "ceiling.max_request"),
        (lambda: CeilingParams(150), ValueError, "ceiling.max_request_tokens"),
        (lambda: ContextSummarizerParams(summary_role="system"), ValueError, "summary_role"),
        (lambda: ContextSummarizerParams(ceiling=900), TypeError, "ceiling"),
        (lambda: ContextSummarizerParams(trigger={"auto": False}), TypeError, "trigger"),
        (lambda: ContextSummarizerParams(max_summary_input_tokens=50), ValueError, "max_summ"),
        (lambda: ContextSummarizerParams(token_counter="cl100k_base"), TypeError, "token_coun"),
    ],
)
def test_bad_values_fail_at_construction_naming_the_field(build, error, name):
    with pytest.raises(error, match=name):
        build()


def test_as_params_takes_one_form_and_names_the_argument():
    assert as_params(None) == ContextSummarizerParams()
    with pytest.raises(TypeError, match="params must be a ContextSummarizerParams"):
        as_params({"ceiling": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        flat = SummarizerOptions()
    with pytest.raises(TypeError, match="not both"):
        as_params(ContextSummarizerParams(), flat)
    with pytest.raises(TypeError, match="options must be a SummarizerOptions"):
        as_params(None, ContextSummarizerParams())


def test_the_processor_takes_params_or_the_deprecated_options_alike():
    def build(**kwargs):
        return ContextSummarizer(
            context=LLMContext(), config=cfg(), summarizer=AsyncSummarizer(), **kwargs
        )

    grouped = build(params=ContextSummarizerParams(ceiling=CeilingParams(500)))
    with pytest.warns(DeprecationWarning):
        flat = build(options=SummarizerOptions(max_request_tokens=500))
    assert grouped._params == flat._params
    assert grouped.memory.pinning.app_role == "developer"


def test_the_renamed_event_and_tool_argument_warn_but_work():
    import pipecat_summarizer
    from pipecat_summarizer import ContextCompactedEvent

    with pytest.warns(DeprecationWarning, match="ContextCompactedEvent"):
        assert pipecat_summarizer.SummaryAppliedEvent is ContextCompactedEvent
    with pytest.raises(AttributeError):
        pipecat_summarizer.NoSuchName  # noqa: B018


def test_register_remember_fact_takes_the_processor_under_its_name():
    from pipecat.services.openai.llm import OpenAILLMService

    from pipecat_summarizer import register_remember_fact

    processor = ContextSummarizer(context=LLMContext(), config=cfg(), summarizer=AsyncSummarizer())
    llm = OpenAILLMService(api_key="test", model="gpt-4o-mini")
    assert register_remember_fact(llm, processor=processor).name == "remember_fact"
    with pytest.warns(DeprecationWarning, match="processor="):
        register_remember_fact(llm, summarizer=processor)
    with pytest.raises(TypeError, match="not also"):
        register_remember_fact(llm, processor, summarizer=processor)
    with pytest.raises(TypeError, match="needs the processor"):
        register_remember_fact(llm)
