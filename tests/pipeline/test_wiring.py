"""The processor's wiring of others' interfaces: the summarizer is attached once at start and
detached once at the end (the first of End, Cancel and cleanup); ``user_id``/``call_id``
without a store are refused at construction, naming the field. Real pipelines against the
local OpenAI-protocol server."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import CancelFrame, LLMSummarizeContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer import ContextSummarizer
from pipecat_summarizer._compaction.prompt import SummaryRequest
from tests.support.pipeline_utils import build, cfg, main_llm, turns


class CountingSummarizer:
    """A summarizer backend that counts the processors using it (as OpenAISummarizer does)."""

    def __init__(self) -> None:
        self.attached = 0
        self.detached = 0
        self.requests = 0

    def attach(self) -> None:
        self.attached += 1

    async def detach(self) -> None:
        self.detached += 1

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests += 1
        return "FACTS:\n- summarized"


@pytest.mark.parametrize("end", ["end", "cancel"])
async def test_the_summarizer_is_attached_at_start_and_detached_once_at_the_end(openai_server, end):
    backend = CountingSummarizer()
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context, config=cfg(messages=4, keep=1), summarizer=backend
    )
    override = main_llm(openai_server.base_url)  # a manual frame's own LLM: not attached
    frames = [
        *turns([f"user message number {i}" for i in range(5)], gap=0.15),
        LLMSummarizeContextFrame(config=LLMContextSummaryConfig(llm=override)),
        SleepFrame(sleep=0.3),
    ]
    if end == "cancel":
        frames.append(CancelFrame())
    await run_test(
        build(context, processor, main_llm(openai_server.base_url)),
        frames_to_send=frames,
        send_end_frame=end == "end",
    )
    await processor.cleanup()  # after End/Cancel: no second detach
    assert backend.requests >= 1
    assert (backend.attached, backend.detached) == (1, 1)


@pytest.mark.parametrize("field", ["user_id", "call_id"])
def test_ids_without_a_store_are_refused_naming_the_field(field):
    context = LLMContext()
    with pytest.raises(ValueError, match=field):
        ContextSummarizer(
            context=context, config=cfg(), summarizer=CountingSummarizer(), **{field: "x"}
        )
