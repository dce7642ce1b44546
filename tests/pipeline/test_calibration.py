"""Calibration by the provider's reported usage, through real pipelines: Pipecat's OpenAI
service against the local server, whose replies report ``usage`` as a tokenizer counting a
set multiple of our estimate would; usage metrics on, as ``PipelineParams`` turns them on."""

from __future__ import annotations

import asyncio
import math

import pytest_asyncio
from pipecat.frames.frames import MetricsFrame
from pipecat.metrics.metrics import LLMUsageMetricsData
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.task import PipelineParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import CeilingParams, ContextSummarizerParams, TriggerParams
from pipecat_summarizer.params.compaction import CalibrationParams
from tests.support.openai_server import FakeOpenAIServer, Reply, is_summary_request
from tests.support.pipeline_utils import cfg, echo_summary, main_llm, turns
from tests.support.settle import Gap, run_settling

ESTIMATE = EstimateTokenCounter()


@pytest_asyncio.fixture
async def other_server():
    """A second local server, so that the two calls a test compares run side by side."""
    server = FakeOpenAIServer()
    await server.start()
    yield server
    await server.stop()


def provider(factor: float, reported: list[int], *, summary_status: int = 200, cached=0):
    """A server handler whose chat replies report ``factor`` times our estimate of the
    request as their input (the stand-in for a tokenizer that counts more than chars/4)."""

    def handler(body: dict) -> Reply:
        if is_summary_request(body):
            return Reply(echo_summary(body), status=summary_status)
        estimate = sum(ESTIMATE.count_message(m) for m in body["messages"])
        prompt = math.ceil(estimate * factor)
        reported.append(prompt)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": 3,
            "total_tokens": prompt + 3,
            "prompt_tokens_details": {"cached_tokens": min(cached, prompt)},
        }
        return Reply("Sure thing.", usage=usage)

    return handler


class Call:
    """One call: user aggregator, processor, Pipecat's OpenAI service, the companion after
    it, the assistant aggregator; usage metrics on or off."""

    def __init__(self, server, config, params: ContextSummarizerParams, *, metrics: bool):
        self.context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
        self.processor = ContextSummarizer(
            context=self.context,
            config=config,
            summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
            params=params,
        )
        self.metrics = metrics
        self.server = server
        self.applied: list = []
        self.evicted: list = []
        self.processor.add_event_handler("on_context_compacted", self._applied)
        self.processor.add_event_handler("on_messages_evicted", self._evicted)

    async def _applied(self, _, event):
        self.applied.append(event)

    async def _evicted(self, _, event):
        self.evicted.append(event)

    async def run(self, texts: list[str]):
        pair = LLMContextAggregatorPair(self.context)
        llm = main_llm(self.server.base_url)
        pipeline = Pipeline(
            [pair.user(), self.processor, llm, self.processor.after_llm(), pair.assistant()]
        )
        self.down, _ = await run_settling(
            pipeline,
            frames_to_send=[*turns(texts), Gap(sleep=0.3)],
            pipeline_params=PipelineParams(
                enable_metrics=self.metrics, enable_usage_metrics=self.metrics
            ),
        )
        return self


def lines(n: int, words: int = 40) -> list[str]:
    return [f"user message number {i} " + " ".join(["detail"] * words) for i in range(n)]


async def test_reported_usage_moves_the_token_threshold_as_the_calibration_says(
    openai_server, other_server, logs
):
    """A provider counting twice our estimate: the token threshold trips on the turn the
    calibrated count reaches it, where the estimate alone would still wait."""
    config = cfg(tokens=1200, messages=None, keep=2)
    params = ContextSummarizerParams(trigger=TriggerParams(soft_ratio=1.0))
    reported: list[int] = []
    openai_server.handler = provider(2.0, reported, cached=100)
    other_server.handler = provider(2.0, [], cached=100)
    calibrated, estimated = await asyncio.gather(
        Call(openai_server, config, params, metrics=True).run(lines(8)),
        Call(other_server, config, params, metrics=False).run(lines(8)),
    )

    assert [e.reason for e in calibrated.applied][:1] == ["tokens"]
    assert estimated.applied == []  # the estimate alone never reached 1,200
    # it started when the calibrated count crossed the threshold, not before
    first = calibrated.applied[0]
    assert first.tokens_before * 2 >= 1200 * 0.9

    report = calibrated.processor.token_calibration
    assert report.requests_reported >= 4
    assert report.ratio > 1.7
    assert report.mean_error_after < report.mean_error_before
    assert 0 < report.cache_hit_rate < 1
    assert estimated.processor.token_calibration.requests_reported == 0
    info = [r["message"] for r in logs if r["level"].name == "INFO"]
    line = next(m for m in info if "token calibration" in m)
    assert "detail" not in line and "requests=" in line and "cache_hit_rate=" in line


async def test_without_usage_metrics_the_decisions_are_those_of_the_estimate(
    openai_server, other_server
):
    """Usage metrics off (calibration on by default) and usage metrics on with calibration
    off decide the same compactions at the same turns, whatever the provider reports."""
    config = cfg(tokens=900, messages=10, keep=2)
    openai_server.handler = provider(3.0, [])
    other_server.handler = provider(3.0, [])
    disabled = ContextSummarizerParams(calibration=CalibrationParams(enabled=False))
    off, on = await asyncio.gather(
        Call(openai_server, config, ContextSummarizerParams(), metrics=False).run(lines(12)),
        Call(other_server, config, disabled, metrics=True).run(lines(12)),
    )
    planned_off = [r["messages"][1]["content"] for r in openai_server.summary_requests]
    planned_on = [r["messages"][1]["content"] for r in other_server.summary_requests]

    # the decisions: why each compaction started and what it summarized (its transcript);
    # when its summary lands (tokens_before) depends on the turn it meets, not compared
    def decisions(call: Call) -> list[tuple]:
        return [(e.reason, e.messages_summarized) for e in call.applied]

    assert decisions(off) and decisions(off) == decisions(on)
    assert planned_off and planned_off == planned_on
    assert off.processor.token_calibration.requests_reported == 0
    assert on.processor.token_calibration.requests_reported == 0


async def test_the_ceiling_holds_in_reported_tokens_while_calibrating(openai_server, other_server):
    """A tokenizer counting 1.5x the estimate, summaries failing (only eviction holds the
    ceiling): no request the provider counted is over max_request_tokens; the estimate
    alone lets them through."""
    config = cfg(tokens=50_000, messages=200, keep=2)
    ceiling = CeilingParams(max_request_tokens=900)
    reported: list[int] = []
    uncalibrated: list[int] = []
    openai_server.handler = provider(1.5, reported, summary_status=500)
    other_server.handler = provider(1.5, uncalibrated, summary_status=500)
    call = Call(openai_server, config, ContextSummarizerParams(ceiling=ceiling), metrics=True)
    disabled = ContextSummarizerParams(
        ceiling=ceiling, calibration=CalibrationParams(enabled=False)
    )
    await asyncio.gather(
        call.run(lines(16)), Call(other_server, config, disabled, metrics=True).run(lines(16))
    )
    assert call.evicted, "the ceiling had to evict"
    assert len(reported) == 16
    assert max(reported) <= 900, reported
    assert max(uncalibrated) > 900  # what the estimate alone lets through


async def test_a_summary_reports_its_usage_as_a_service_does(openai_server):
    """The secondary LLM's usage goes downstream as Pipecat's usage metrics (our name, the
    summarizer's model) and into the compaction event."""

    def handler(body: dict) -> Reply:
        if is_summary_request(body):
            usage = {
                "prompt_tokens": 321,
                "completion_tokens": 45,
                "total_tokens": 366,
                "prompt_tokens_details": {"cached_tokens": 300},
            }
            return Reply(echo_summary(body), usage=usage)
        return Reply("Sure thing.")

    openai_server.handler = handler
    call = Call(openai_server, cfg(messages=6, keep=2), ContextSummarizerParams(), metrics=True)
    await call.run(lines(6, words=3))
    assert call.applied
    event = call.applied[0]
    assert (event.summary_prompt_tokens, event.summary_completion_tokens) == (321, 45)
    assert event.summary_cached_tokens == 300
    ours = [
        d
        for f in call.down
        if isinstance(f, MetricsFrame)
        for d in f.data
        if isinstance(d, LLMUsageMetricsData) and d.processor == call.processor.name
    ]
    assert ours and ours[0].model == "cheap"
    assert ours[0].value.prompt_tokens == 321 and ours[0].value.cache_read_input_tokens == 300


async def test_without_usage_metrics_a_summary_pushes_no_metrics(openai_server):
    openai_server.handler = provider(1.0, [])
    call = Call(openai_server, cfg(messages=6, keep=2), ContextSummarizerParams(), metrics=False)
    await call.run(lines(6, words=3))
    assert call.applied and call.applied[0].summary_prompt_tokens is not None
    assert not [f for f in call.down if isinstance(f, MetricsFrame)]
