"""Trigger thresholds, config validation and failure backoff."""

import pytest

from pipecat_summarizer import LLMAutoContextSummarizationConfig, LLMContextSummaryConfig
from pipecat_summarizer._compaction.failures import FailureTracker
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.trigger import trigger_reason, validate_config


def cfg(tokens=8000, messages=20, keep=4):
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=tokens,
        max_unsummarized_messages=messages,
        summary_config=LLMContextSummaryConfig(min_messages_after_summary=keep),
    )


def test_token_trigger_counts_only_reducible_tokens():
    big_system = Measurement(
        total_tokens=12_000, reducible_tokens=500, messages_since_summary=3, message_count=4
    )
    assert trigger_reason(cfg(), big_system) is None
    grown = Measurement(12_000 + 8000, 8000, 3, 40)
    assert trigger_reason(cfg(), grown) == "tokens"


def test_message_trigger_and_disabled_thresholds():
    m = Measurement(100, 100, 20, 21)
    assert trigger_reason(cfg(), m) == "messages"
    assert trigger_reason(cfg(messages=None), m) is None
    assert trigger_reason(cfg(tokens=None), Measurement(10**6, 10**6, 1, 2)) is None


def test_config_that_would_fire_every_turn_is_rejected():
    with pytest.raises(ValueError, match="min_messages_after_summary"):
        validate_config(cfg(messages=4, keep=4))
    validate_config(cfg(messages=5, keep=4))
    bad = cfg()
    bad.summary_config.summary_message_template = "no placeholder"
    with pytest.raises(ValueError, match="summary"):
        validate_config(bad)


def test_failure_backoff_escalates_once_and_resets():
    t = FailureTracker(backoff_s=1, max_backoff_s=5, error_after=3)
    assert t.ready(0)
    assert t.failed(0) == (1, False) and not t.ready(0.5) and t.ready(1)
    assert t.failed(1) == (2, False)
    assert t.failed(3) == (4, True)
    assert t.failed(7) == (5, False)  # capped, and the ERROR is not repeated
    t.succeeded()
    assert t.ready(7) and t.consecutive == 0
    t.failed(8), t.failed(9)
    assert t.failed(10)[1] is True  # a new streak escalates again


def test_summary_budget_is_capped_so_a_summary_cannot_refill_the_context():
    from pipecat_summarizer._compaction.trigger import summary_budget

    assert summary_budget(cfg()) == 2000  # Pipecat's 6000 of 8000 would re-trigger
    assert summary_budget(cfg(tokens=None)) == 6000
    small = cfg(tokens=100_000)
    small.summary_config.target_context_tokens = 700
    assert summary_budget(small) == 700
