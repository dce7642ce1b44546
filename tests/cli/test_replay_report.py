"""Metrics and cost arithmetic (pure), and the report of a real three-way replay."""

import json

import pytest

from pipecat_summarizer_cli.replay.report import (
    REPORT_KEYS,
    Prices,
    RequestTokens,
    StrategyResult,
    build_report,
    cached_tokens,
    compaction_points,
    per_turn_tokens,
    percentile,
    prefix_stable_fraction,
    probes_found,
)
from pipecat_summarizer_cli.replay.runner import Backend, Thresholds, run_all
from pipecat_summarizer_cli.replay.tables import format_table, merge_reports
from pipecat_summarizer_cli.replay.transcript import transcript_from_messages
from tests.support.replay_fakes import StandInLLM, StandInSummarizer, conversation


def req(turn, *messages_and_tokens, system=0):
    names = tuple(m for m, _ in messages_and_tokens)
    tokens = tuple(t for _, t in messages_and_tokens)
    return RequestTokens(turn, names, tokens, system)


def test_prefix_stability_and_cached_tokens():
    requests = [
        req(1, ("s", 100), ("u1", 10)),
        req(2, ("s", 100), ("u1", 10), ("a1", 20), ("u2", 10)),  # extends: cache hit
        req(3, ("s", 100), ("sum", 30), ("u3", 10)),  # rewritten after "s"
        req(4, ("s", 100), ("sum", 30), ("u3", 10), ("a3", 5), ("u4", 5)),
    ]
    assert prefix_stable_fraction(requests) == pytest.approx(2 / 3)
    assert cached_tokens(requests) == [0, 110, 100, 140]
    assert compaction_points(requests) == [2]
    assert per_turn_tokens(requests, 5) == [110, 140, 140, 150, 0]
    assert prefix_stable_fraction(requests[:1]) == 1.0
    assert prefix_stable_fraction([]) == 0.0
    # An unchanged system instruction is part of the cached prefix.
    with_system = [req(1, ("u", 10), system=50), req(2, ("u", 10), ("a", 10), system=50)]
    assert cached_tokens(with_system) == [0, 60]


def test_costs_follow_the_stated_arithmetic():
    requests = [req(1, ("s", 1_000_000)), req(2, ("s", 1_000_000), ("u", 1_000_000))]
    result = StrategyResult(
        "pipecat_summarizer",
        requests,
        summary_calls=[(2_000_000, 100_000)],
        summaries_applied=1,
        hot_path_ns=[1000, 2000, 3000],
        final_text="I'm VEGETARIAN.",
    )
    prices = Prices(input=3, output=15, cached_input=0.3, summary_input=0.15, summary_output=0.6)
    entry = build_report([result], turns=2, prices=prices, probes=["vegetarian", "peanuts"])[
        "strategies"
    ]["pipecat_summarizer"]
    assert entry["input_tokens"] == 3_000_000
    # main input 3M * $3, and the summarizer at its own prices: 2M * $0.15 + 0.1M * $0.60
    assert entry["cost_usd"] == pytest.approx(9 + 0.3 + 0.06)
    # the second request's first 1M tokens are cached: 2M * $3 + 1M * $0.3, plus the summarizer
    assert entry["cost_usd_with_cache"] == pytest.approx(6 + 0.3 + 0.36)
    # the defaults price the summarizer as a small model (gpt-4o-mini), not as the main one
    assert (Prices().summary_input, Prices().summary_output) == (0.15, 0.6)
    assert (Prices().input, Prices().output) == (3.0, 15.0)
    assert entry["cached_input_tokens"] == 1_000_000
    assert entry["max_request_tokens"] == 2_000_000
    assert entry["mean_request_tokens"] == 1_500_000
    assert entry["probes_retained"] == 1 and entry["probes_total"] == 2
    assert entry["probes_missing"] == ["peanuts"]
    assert entry["hot_path_us_p50"] == 2.0
    assert entry["hot_path_us_p99"] == pytest.approx(2.98)


def test_percentile_and_probes():
    assert percentile([], 50) == 0.0
    assert percentile([5], 99) == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert probes_found("Allergic to PEANUTS", ["allergic to peanuts", "vegan"]) == [
        "allergic to peanuts"
    ]


async def test_three_way_report_has_the_required_keys_and_sane_values():
    transcript = transcript_from_messages(conversation(14), name="small")
    results = await run_all(
        transcript,
        backend=Backend("stand-in", StandInSummarizer, StandInLLM),
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
    )
    report = build_report(
        results, turns=len(transcript.turns), prices=Prices(), probes=["vegetarian"]
    )
    assert report["turns"] == 14
    assert list(report["strategies"]) == ["full_buffer", "pipecat_builtin", "pipecat_summarizer"]
    for name, entry in report["strategies"].items():
        assert set(REPORT_KEYS) <= set(entry), name
        assert entry["probes_total"] == 1
        assert 0.0 <= entry["prefix_stable_fraction"] <= 1.0
        assert entry["max_request_tokens"] >= entry["mean_request_tokens"] > 0
        assert entry["cost_usd"] > 0 and entry["cost_usd_with_cache"] > 0
    full = report["strategies"]["full_buffer"]
    ours = report["strategies"]["pipecat_summarizer"]
    builtin = report["strategies"]["pipecat_builtin"]
    assert full["summaries_applied"] == 0 and full["summary_input_tokens"] == 0
    assert full["prefix_stable_fraction"] == 1.0
    assert full["hot_path_us_p50"] == 0.0
    assert full["probes_retained"] == 1
    assert ours["summaries_applied"] >= 1 and builtin["summaries_applied"] >= 1
    assert ours["summary_input_tokens"] > 0 and ours["summary_output_tokens"] > 0
    assert builtin["summary_input_tokens"] > 0 and builtin["summary_output_tokens"] > 0
    assert ours["input_tokens"] <= full["input_tokens"]
    assert builtin["input_tokens"] <= full["input_tokens"]
    assert ours["hot_path_frames"] == 14 and ours["hot_path_us_p50"] > 0
    # the built-in's check runs inside Pipecat's aggregator: benchmarks/hot_path.py times it
    assert builtin["hot_path_frames"] == 0
    for entry in (ours, builtin):  # instant mode: every request comes back and is applied
        assert entry["summaries_requested"] == entry["summaries_applied"] >= 1
        assert entry["summaries_discarded"] == entry["summaries_unfinished"] == 0
    json.dumps(report)  # serializable
    table = format_table(report)
    assert "pipecat_summarizer" in table and "probes retained" in table


def test_merge_reports_sums_and_weights():
    def entry(tokens, requests, stable, recall, items):
        e = {k: 0 for k in REPORT_KEYS}
        e.update(
            input_tokens=tokens,
            requests=requests,
            max_request_tokens=tokens // requests,
            prefix_stable_fraction=stable,
            answer_recall=recall,
            qa_items=items,
            cost_usd=tokens * 3 / 1e6,
        )
        return e

    merged = merge_reports(
        [
            {"turns": 3, "strategies": {"full_buffer": entry(300, 3, 1.0, 1.0, 10)}},
            {"turns": 5, "strategies": {"full_buffer": entry(1000, 5, 0.5, 0.5, 30)}},
        ],
        {"full_buffer": [1000, 3000]},
    )
    m = merged["strategies"]["full_buffer"]
    assert merged["turns"] == 8
    assert m["input_tokens"] == 1300 and m["requests"] == 8
    assert m["mean_request_tokens"] == 162.5
    assert m["max_request_tokens"] == 200
    assert m["prefix_stable_fraction"] == pytest.approx((1.0 * 2 + 0.5 * 4) / 6, abs=1e-4)
    assert m["answer_recall"] == pytest.approx((10 + 15) / 40)
    assert m["hot_path_us_p50"] == 2.0
    assert set(REPORT_KEYS) <= set(m)


class FailingSummarizer:
    async def summarize(self, request):
        raise RuntimeError("backend down")


class FailingLLM(StandInLLM):
    async def run_inference(self, context, max_tokens=None, system_instruction=None, **kwargs):
        raise RuntimeError("backend down")


async def test_failing_summarizers_leave_the_context_whole():
    transcript = transcript_from_messages(conversation(10), name="small")
    results = await run_all(
        transcript,
        backend=Backend("failing", FailingSummarizer, FailingLLM),
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
    )
    report = build_report(results, turns=10, prices=Prices(), probes=["vegetarian"])
    full = report["strategies"]["full_buffer"]
    for name in ("pipecat_builtin", "pipecat_summarizer"):
        entry = report["strategies"][name]
        assert entry["summaries_applied"] == 0, name
        assert entry["summary_failures"] >= 1, name
        assert entry["summary_input_tokens"] > 0 and entry["summary_output_tokens"] == 0, name
        assert entry["input_tokens"] == full["input_tokens"], name
        assert entry["probes_retained"] == 1, name
