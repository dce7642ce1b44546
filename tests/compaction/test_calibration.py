"""The calibration rule: matching usage reports to request estimates, the clipped smoothed
ratio, the ceiling's scale with its margin, and the options' validation (pure, no loop)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._compaction.calibration import (
    TokenCalibration,
    ceiling_scale,
    next_ratio,
    percentile,
    reported_input,
)
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.trigger import CompactionTrigger, trigger_reason
from pipecat_summarizer.params import ContextSummarizerParams
from pipecat_summarizer.params.compaction import CalibrationParams
from tests.support.pipeline_utils import cfg

PARAMS = CalibrationParams()
samples = st.floats(min_value=0.01, max_value=50.0, allow_nan=False)
estimates = st.integers(min_value=1, max_value=200_000)


@given(st.lists(samples, min_size=1, max_size=40))
def test_the_ratio_stays_within_its_clip_whatever_the_samples(values):
    ratio = None
    for v in values:
        ratio = next_ratio(ratio, v, PARAMS)
        assert PARAMS.min_ratio <= ratio <= PARAMS.max_ratio


@given(
    st.floats(min_value=0.5, max_value=3.0),
    st.lists(st.integers(100, 200_000), min_size=2, max_size=20),
)
def test_a_steady_provider_ratio_is_learned_from_the_first_report(true_ratio, sizes):
    cal = TokenCalibration(PARAMS)
    for size in sizes:
        cal.request(size)
        cal.report(max(1, round(size * true_ratio)))
    assert cal.scale == pytest.approx(true_ratio, rel=0.05, abs=0.05)
    report = cal.summary()
    assert report.requests_reported == len(sizes)
    # every request after the first ran on the learned ratio (up to the rounding of a
    # token count: one token of the smallest request)
    assert report.mean_error_after <= report.mean_error_before + 1.0 / min(sizes) + 1e-9


@given(st.lists(st.tuples(estimates, st.floats(min_value=0.5, max_value=3.0)), max_size=30))
def test_the_ceiling_scale_covers_the_recent_samples_with_the_margin(history):
    cal = TokenCalibration(PARAMS)
    for size, ratio in history:
        cal.request(size)
        cal.report(max(1, round(size * ratio)))
    if not history:
        assert cal.ceiling_scale == 1.0
        return
    recent = [max(1, round(s * r)) / s for s, r in history[-PARAMS.window :]]
    recent = [min(PARAMS.max_ratio, max(PARAMS.min_ratio, x)) for x in recent]
    assert cal.ceiling_scale >= max(recent) * (1 + PARAMS.margin) - 1e-9
    assert cal.ceiling_scale >= cal.scale * (1 + PARAMS.margin) - 1e-9


@given(estimates, st.floats(min_value=0.5, max_value=3.0), st.floats(min_value=0.5, max_value=1.0))
def test_a_request_within_the_recent_samples_never_passes_the_calibrated_ceiling(
    size, ratio, share
):
    """A request whose provider ratio is no larger than a recent one's, under the ceiling in
    calibrated estimate (estimate * ceiling_scale <= max), is under it in reported tokens."""
    cal = TokenCalibration(PARAMS)
    cal.request(size)
    cal.report(max(1, round(size * ratio)))
    maximum = 10_000
    estimate = int(maximum / cal.ceiling_scale * share)  # what the ceiling lets through
    sample = max(1, round(size * ratio)) / size
    assert estimate * min(sample, PARAMS.max_ratio) <= maximum


def test_without_a_report_both_scales_are_exactly_one():
    cal = TokenCalibration(PARAMS)
    cal.request(1000)
    cal.request(2000)
    assert (cal.scale, cal.ceiling_scale, cal.calibrated) == (1.0, 1.0, False)
    assert ceiling_scale(None, [], PARAMS) == 1.0


def test_a_report_without_a_request_waiting_is_ignored():
    cal = TokenCalibration(PARAMS)
    assert cal.report(500) is False
    cal.request(100)
    assert cal.report(150) is True
    assert cal.report(900) is False  # the request was already answered
    report = cal.summary()
    assert (report.requests_reported, report.reports_ignored) == (1, 2)
    assert cal.scale == pytest.approx(1.5)


def test_a_report_belongs_to_the_latest_request_and_drops_the_unanswered_ones():
    cal = TokenCalibration(PARAMS)
    cal.request(100)  # cut off before its usage came
    cal.request(1000)
    cal.report(1200)
    assert cal.scale == pytest.approx(1.2)
    assert cal.report(130) is False  # the older request is gone, not matched late


def test_an_estimate_is_counted_only_when_its_report_arrives():
    counted: list[int] = []
    cal = TokenCalibration(PARAMS)
    cal.request(lambda: counted.append(1) or 400)
    assert counted == []
    cal.report(600)
    assert counted == [1]
    assert cal.scale == pytest.approx(1.5)


def test_disabled_calibration_never_moves():
    cal = TokenCalibration(CalibrationParams(enabled=False))
    cal.request(100)
    cal.report(300)
    assert (cal.scale, cal.ceiling_scale) == (1.0, 1.0)


def test_errors_before_and_after_use_the_scale_known_when_the_request_was_sent():
    cal = TokenCalibration(CalibrationParams(smoothing=1.0))
    cal.request(100)
    cal.report(150)  # before: 50/150; after (scale 1 then): the same
    cal.request(200)
    cal.report(300)  # before: 100/300; after: 200*1.5 = 300, no error
    report = cal.summary()
    assert report.mean_error_before == pytest.approx((50 / 150 + 100 / 300) / 2)
    assert report.mean_error_after == pytest.approx((50 / 150 + 0) / 2)
    assert "conversation" not in report.log_line() and "requests=2" in report.log_line()


def test_cache_hit_rate_is_cached_input_over_input():
    cal = TokenCalibration(PARAMS)
    cal.request(100)
    cal.report(1000, 800)
    cal.request(100)
    cal.report(1000, 0)
    assert cal.summary().cache_hit_rate == pytest.approx(0.4)


def test_reported_input_is_gross_whichever_way_the_service_counts_the_cache():
    openai_like = SimpleNamespace(
        prompt_tokens=1000, completion_tokens=50, total_tokens=1050, cache_read_input_tokens=800
    )
    anthropic_like = SimpleNamespace(  # prompt net of the cache, total gross
        prompt_tokens=200, completion_tokens=50, total_tokens=1050, cache_read_input_tokens=800
    )
    assert reported_input(openai_like) == (1000, 800)
    assert reported_input(anthropic_like) == (1000, 800)
    assert reported_input(SimpleNamespace(prompt_tokens=None)) is None
    assert reported_input(SimpleNamespace(prompt_tokens=0, completion_tokens=0)) is None


def test_percentile_is_nearest_rank():
    assert percentile([], 0.95) == 0.0
    assert percentile([float(i) for i in range(1, 21)], 0.95) == 19.0


@given(st.integers(0, 20_000), st.floats(min_value=0.5, max_value=3.0))
def test_the_token_threshold_compares_the_calibrated_count(reducible, scale):
    config = cfg(tokens=8000, messages=None)
    m = Measurement(reducible, reducible, 3, 5, scale)
    tripped = trigger_reason(config, m, 1.0) == "tokens"
    assert tripped == (reducible * scale >= 8000)


def test_uncalibrated_measurements_trip_exactly_as_before():
    config = cfg(tokens=8000, messages=None)
    for reducible in (7999, 8000, 8001):
        assert trigger_reason(config, Measurement(reducible, reducible, 3, 5), 1.0) == (
            "tokens" if reducible >= 8000 else None
        )


def test_the_cadence_and_the_gain_run_in_the_calibrated_tokens():
    trigger = CompactionTrigger(cfg(tokens=8000, messages=None))
    trigger.due(Measurement(1000, 1000, 3, 5, 2.0), now=0.0, in_flight=False, pending=False)
    assert trigger.scale == 2.0
    # min_token_gain 0.1 of 8000 = 800 provider tokens: 500 estimated ones are 1,000
    assert trigger.worth_it("tokens", 500, lambda: 1000)
    assert not trigger.worth_it("tokens", 300, lambda: 1000)
    assert trigger.replan_at_tokens == 2000 + (800 - 600)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("smoothing", 0.0),
        ("smoothing", 1.5),
        ("margin", -0.1),
        ("min_ratio", 0.0),
        ("max_ratio", 0.9),
        ("window", 0),
        ("smoothing", math.nan),
    ],
)
def test_bad_calibration_options_fail_at_construction_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"calibration.{field}"):
        CalibrationParams(**{field: value})


def test_calibration_options_of_a_wrong_type_are_named():
    with pytest.raises(TypeError, match="calibration.enabled"):
        CalibrationParams(enabled="yes")
    with pytest.raises(TypeError, match="calibration must be a CalibrationParams"):
        ContextSummarizerParams(calibration={"margin": 0.2})
