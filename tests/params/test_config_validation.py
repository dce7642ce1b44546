"""Configuration fails at construction, with the field named."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest
from pipecat.frames.frames import LLMSummarizeContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import (
    DEFAULT_SUMMARIZATION_TIMEOUT,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer, SummarizerOptions
from pipecat_summarizer._compaction import trigger as policy
from pipecat_summarizer._compaction.trigger import (
    FailureTracker,
    effective_timeout,
    validate_config,
)
from pipecat_summarizer._validation import _numeric_kind, check_number
from tests.support.pipeline_utils import Run, cfg, turns

NAN, INF = float("nan"), float("inf")


class AsyncSummarizer:
    async def summarize(self, request):
        return "FACTS:\n- x"


def build(config=None, options=None, summarizer=None):
    return ContextSummarizer(
        context=LLMContext(),
        config=config if config is not None else cfg(),
        summarizer=summarizer if summarizer is not None else AsyncSummarizer(),
        options=options,
    )


def auto_config(**changes):
    """A valid config, then fields overwritten (Pipecat's dataclasses stay mutable, and its
    own checks pass NaN, infinity and bools)."""
    config = cfg(tokens=8000, messages=8, keep=4)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


def summary_config(**changes):
    config = cfg(tokens=8000, messages=8, keep=4)
    for name, value in changes.items():
        setattr(config.summary_config, name, value)
    return config


# (build the object, exception type, text the message must contain)
TABLE = [
    # Pipecat's LLMAutoContextSummarizationConfig
    (lambda: build(auto_config(max_context_tokens=NAN)), ValueError, "max_context_tokens"),
    (lambda: build(auto_config(max_context_tokens=INF)), ValueError, "max_context_tokens"),
    (lambda: build(auto_config(max_context_tokens="8000")), TypeError, "max_context_tokens"),
    (lambda: build(auto_config(max_context_tokens=True)), TypeError, "max_context_tokens"),
    (lambda: build(auto_config(max_context_tokens=800.5)), TypeError, "max_context_tokens"),
    (lambda: build(auto_config(max_unsummarized_messages=NAN)), ValueError, "max_unsummarized"),
    (lambda: build(auto_config(max_unsummarized_messages="8")), TypeError, "max_unsummarized"),
    (lambda: build(auto_config(max_unsummarized_messages=True)), TypeError, "max_unsummarized"),
    (lambda: build(auto_config(summary_config=None)), TypeError, "summary_config"),
    (lambda: build(auto_config(summary_config={"x": 1})), TypeError, "summary_config"),
    # Pipecat's LLMContextSummaryConfig
    (lambda: build(summary_config(summarization_timeout=NAN)), ValueError, "summarization_timeout"),
    (lambda: build(summary_config(summarization_timeout=INF)), ValueError, "summarization_timeout"),
    (lambda: build(summary_config(summarization_timeout="5")), TypeError, "summarization_timeout"),
    (lambda: build(summary_config(summarization_timeout=True)), TypeError, "summarization_timeout"),
    (lambda: build(summary_config(summarization_timeout=0)), ValueError, "summarization_timeout"),
    (lambda: build(summary_config(target_context_tokens=NAN)), ValueError, "target_context_tokens"),
    (lambda: build(summary_config(target_context_tokens="9")), TypeError, "target_context_tokens"),
    (lambda: build(summary_config(target_context_tokens=1.5)), TypeError, "target_context_tokens"),
    (lambda: build(summary_config(min_messages_after_summary=NAN)), ValueError, "min_messages"),
    (lambda: build(summary_config(min_messages_after_summary=False)), TypeError, "min_messages"),
    # ours
    (lambda: SummarizerOptions(retry_backoff_s=NAN), ValueError, "retry_backoff_s"),
    (lambda: SummarizerOptions(max_retry_backoff_s=NAN), ValueError, "max_retry_backoff_s"),
    (lambda: SummarizerOptions(max_retry_backoff_s=INF), ValueError, "max_retry_backoff_s"),
    (lambda: SummarizerOptions(soft_trigger_ratio=NAN), ValueError, "soft_trigger_ratio"),
    (lambda: SummarizerOptions(min_token_gain="0.1"), TypeError, "min_token_gain"),
    (lambda: SummarizerOptions(max_request_tokens=True), TypeError, "max_request_tokens"),
    (lambda: SummarizerOptions(max_summary_input_tokens=NAN), ValueError, "max_summary_input"),
    (lambda: SummarizerOptions(pinned_facts_tokens=300.0), TypeError, "pinned_facts_tokens"),
    (lambda: SummarizerOptions(error_after_failures="3"), TypeError, "error_after_failures"),
    (lambda: build(options={"retry_backoff_s": 1}), TypeError, "options"),
    (lambda: build(options=SummarizerOptions), TypeError, "options"),
    # the summarizer
    (lambda: OpenAISummarizer(model=""), ValueError, "model"),
    (lambda: OpenAISummarizer(model="   "), ValueError, "model"),
    (lambda: OpenAISummarizer(model=None), ValueError, "model"),
    (lambda: OpenAISummarizer(temperature=NAN), ValueError, "temperature"),
    (lambda: OpenAISummarizer(max_concurrency=0), ValueError, "max_concurrency"),
    (lambda: OpenAISummarizer(max_concurrency=2.5), TypeError, "max_concurrency"),
    (lambda: build(summarizer=SyncSummarizer()), TypeError, "summarize"),
    (lambda: build(summarizer=object()), TypeError, "summarize"),
    (lambda: FailureTracker(backoff_s=NAN), ValueError, "backoff_s"),
]


class SyncSummarizer:
    def summarize(self, request):  # not a coroutine function
        return "FACTS:\n- x"


@pytest.mark.parametrize(("make", "error", "field"), TABLE, ids=[row[2] for row in TABLE])
def test_bad_values_are_rejected_at_construction_with_the_field_named(make, error, field):
    with pytest.raises(error) as info:
        make()
    assert field in str(info.value)


NUMERIC_OPTIONS = [
    f.name for f in dataclasses.fields(SummarizerOptions) if _numeric_kind(f.type) is not None
]


@pytest.mark.parametrize("name", NUMERIC_OPTIONS)
@pytest.mark.parametrize(
    ("value", "error"),
    [(NAN, ValueError), (INF, ValueError), (-INF, ValueError), ("1", TypeError), (True, TypeError)],
)
def test_every_numeric_option_rejects_nan_infinity_strings_and_bools(name, value, error):
    """Generic over the dataclass: options added later are covered without a new row."""
    assert NUMERIC_OPTIONS, "the annotation scan found no numeric field"
    with pytest.raises(error, match=name):
        SummarizerOptions(**{name: value})


def test_good_values_still_pass():
    SummarizerOptions(retry_backoff_s=0, max_retry_backoff_s=1, max_request_tokens=None)
    SummarizerOptions(min_token_gain=0, soft_trigger_ratio=1)  # ints where floats are expected
    build(summary_config(summarization_timeout=None))
    validate_config(LLMAutoContextSummarizationConfig())
    OpenAISummarizer(model="m", max_concurrency=None)


def test_check_number_names_the_field():
    with pytest.raises(ValueError, match="speed must be a finite number"):
        check_number("speed", math.nan)
    check_number("speed", None, optional=True)


def test_none_timeout_means_pipecats_fallback_not_forever():
    assert DEFAULT_SUMMARIZATION_TIMEOUT == 120.0
    assert effective_timeout(LLMContextSummaryConfig(summarization_timeout=None)) == 120.0
    assert effective_timeout(LLMContextSummaryConfig(summarization_timeout=7)) == 7.0


def test_backoff_never_overflows():
    tracker = FailureTracker(backoff_s=5.0, max_backoff_s=120.0)  # the options' floats
    # 2 ** 1024 as an int times a float raised OverflowError at the 1,025th failure
    delays = [tracker.failed(now=float(i))[0] for i in range(3000)]
    assert delays[0] == 5 and delays[5] == 120 and delays[-1] == 120
    assert all(math.isfinite(d) for d in delays)


class HangingSummarizer:
    async def summarize(self, request):
        await asyncio.sleep(3600)


async def test_a_hung_summarizer_times_out_at_the_fallback_when_timeout_is_none(
    openai_server, monkeypatch
):
    # Pipecat's 120 s fallback, shortened for the test; the old code waited forever
    monkeypatch.setattr(policy, "DEFAULT_SUMMARIZATION_TIMEOUT", 0.3)
    r = Run(
        openai_server,
        cfg(messages=4, keep=1, summarization_timeout=None),
        summarizer=HangingSummarizer(),
    )
    await r.run(turns([f"user message number {i}" for i in range(6)], gap=0.15), tail=0.5)
    assert r.failed, "the hung summary never timed out"
    assert "timed out after 0.3s" in r.failed[0].error


async def test_a_bad_manual_override_config_does_not_break_the_pipeline(openai_server, logs):
    bad = LLMContextSummaryConfig(summarization_timeout=5)
    bad.summarization_timeout = NAN
    r = Run(openai_server, cfg(messages=50, keep=1))
    frames = turns([f"user message number {i}" for i in range(4)], gap=0.1)
    await r.run([*frames, LLMSummarizeContextFrame(config=bad), *turns(["last one"], gap=0.3)])
    assert any("summarization_timeout" in rec["message"] for rec in logs)
    assert r.applied, "the manual request ran with the processor's own config"
    assert "last one" in str(r.context.messages[-2:])
