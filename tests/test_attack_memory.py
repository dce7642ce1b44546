"""The memory layer attacked as a hostile caller and a careless application would: context
replacements that copy, empty or reorder the conversation, caller text that reads like the
processor's own blocks, keys spelled to slip past the application's, and the caller's memory
arriving at awkward moments. Real pipelines (a real ``LLMContextAggregatorPair``, Pipecat's
OpenAI service and ``OpenAISummarizer`` against the local OpenAI-protocol server) and real
SQLite files; pure rules through the public API."""

from __future__ import annotations

import copy
from collections.abc import Callable

from pipecat.frames.frames import DataFrame, Frame, LLMMessagesUpdateFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.pinned import NOTED_HEADER
from pipecat_summarizer.recall import RECALL_HEADER, RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.recorder import MemoryOptions
from pipecat_summarizer.store.writer import WriterOptions
from tests.openai_server import Reply
from tests.pipeline_utils import cfg, main_llm, turns

FAST = WriterOptions(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful hotel concierge."
HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
ON_TIME = RecallParams(latency_budget_s=5.0)  # about what is recalled, not how fast


class _Do(DataFrame):
    """Runs ``fn`` when it reaches the hook (the application acting between turns)."""

    def __init__(self, fn: Callable[[], None]):
        super().__init__()
        self.fn = fn


class _Hook(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, _Do):
            frame.fn()
            return
        await self.push_frame(frame, direction)


def _pipeline(server, context, processor) -> Pipeline:
    pair = LLMContextAggregatorPair(context)
    return Pipeline([_Hook(), pair.user(), processor, main_llm(server.base_url), pair.assistant()])


def _processor(server, context, store=None, **kwargs) -> ContextSummarizer:
    if store is not None:
        kwargs.setdefault("call_id", "c1")
        kwargs.setdefault("memory", MemoryOptions(writer=FAST))
    return ContextSummarizer(
        context=context,
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        **kwargs,
    )


def _authority_texts(messages: list) -> str:
    return "\n".join(
        str(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )


async def test_an_update_of_copies_never_keeps_an_unpinned_app_fact_in_the_head(openai_server):
    openai_server.handler = lambda body: Reply("Sure thing.")
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    processor = _processor(openai_server, context, config=cfg(messages=40, keep=2))
    frozen = "Account frozen; no refunds"
    processor.pin("status", frozen)
    processor.pin("name", "The caller's name is Dana", source="llm")  # the noted message
    frames = [
        *turns(["Hello there.", "Can I get a refund?"], gap=0.2),
        # the application restores its context from a copy (a reconnect, a serialized
        # state), as an LLMMessagesUpdateFrame does: every message is a new object
        _Do(lambda: context.set_messages(copy.deepcopy(context.get_messages()))),
        _Do(lambda: processor.unpin("status")),
        *turns(["So can I get my refund now?"], gap=0.3),
    ]
    await run_test(_pipeline(openai_server, context, processor), frames_to_send=frames)
    last = openai_server.chat_requests[-1]["messages"]
    assert frozen not in _authority_texts(last)  # the application unpinned it
    noted = [m for m in last if str(m["content"]).startswith(NOTED_HEADER)]
    assert len(noted) == 1  # the copy is the processor's own message, not a caller turn


async def test_an_update_of_copies_keeps_one_recalled_block_never_archived(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure thing.")
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    processor = _processor(
        openai_server, context, store, config=cfg(messages=40, keep=2), recall=ON_TIME
    )
    node = {"role": "system", "content": "You are the billing desk."}
    frames = [
        *turns([HOTEL, "Is the spa open on Sunday?"], gap=0.2),
        # a Flows reset: the hotel turn leaves the context (archived, recallable)
        LLMMessagesUpdateFrame(
            messages=[node, {"role": "user", "content": "A question on my bill."}], run_llm=True
        ),
        SleepFrame(sleep=0.4),
        *turns(["Which hotel were we staying at, the Marquis?"], gap=0.3),
        # the application hands the context back as copies, the recalled block in it
        _Do(lambda: context.set_messages(copy.deepcopy(context.get_messages()))),
        *turns(["And what room was it at the Marquis hotel?"], gap=0.3),
        *turns(["Thanks, that is all."], gap=0.3),
    ]
    try:
        await run_test(_pipeline(openai_server, context, processor), frames_to_send=frames)
        archived = await store.messages("c1")
    finally:
        await store.close()
    asked = [r["messages"] for r in openai_server.chat_requests]
    assert any(m["content"].startswith(RECALL_HEADER) for m in asked[3])  # recalled
    for request in asked[4:]:
        assert sum(str(m["content"]).startswith(RECALL_HEADER) for m in request) <= 1
    assert not any(m.content.startswith(RECALL_HEADER) for m in archived)
