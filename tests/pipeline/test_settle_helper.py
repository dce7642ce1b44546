"""The test helper that ends pauses early must never end one before the turn is written.

A pause that ended as soon as the LLM had pushed its answer's end and nothing had moved for
a moment let the next user turn reach the context before the answer (CI, under load: the
assistant aggregator had not yet run). A part that holds the answer's end stands in for that
slow aggregator here.
"""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import Frame, LLMFullResponseEndFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from tests.support.pipeline_utils import main_llm, turns
from tests.support.settle import run_settling


class _SlowEnd(FrameProcessor):
    """Holds each answer's end a while before passing it on (no frame moves meanwhile)."""

    settled = True  # no timers of its own: the helper may end pauses early

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMFullResponseEndFrame):
            await asyncio.sleep(0.25)
        await self.push_frame(frame, direction)


async def test_a_pause_never_ends_before_the_answer_reaches_the_context(openai_server):
    context = LLMContext()
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline(
        [pair.user(), main_llm(openai_server.base_url), _SlowEnd(), pair.assistant()]
    )
    said = [f"user message number {i}" for i in range(3)]
    await run_settling(pipeline, frames_to_send=turns(said, gap=3.0))
    roles = [m["role"] for m in context.get_messages()]
    assert roles == ["user", "assistant"] * 3
