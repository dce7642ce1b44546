"""Nothing starts after the call's end: a manual summary requested once the pipeline has
ended (a late function handler, an application timer) plans no job and starts no task, so
no summary task is left dangling when the runner stops."""

from __future__ import annotations

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import ContextSummarizer
from pipecat_summarizer.summarizers import ExtractiveSummarizer
from tests.support.pipeline_utils import build, cfg, main_llm, turns


async def test_a_manual_summary_after_the_end_starts_nothing(openai_server):
    context = LLMContext()
    processor = ContextSummarizer(
        context=context, config=cfg(messages=50), summarizer=ExtractiveSummarizer()
    )
    said = [f"turn {i}: " + "about the booking and the hotel " * 4 for i in range(8)]
    await run_test(
        build(context, processor, main_llm(openai_server.base_url)),
        frames_to_send=turns(said, gap=0.1),
    )
    assert len(context.messages) >= 8  # there is something a manual summary could take
    processor.request_manual_summary()
    assert not processor.summary_in_flight
