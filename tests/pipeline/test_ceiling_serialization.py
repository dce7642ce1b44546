"""The ceiling holds where the request is built (fuzz finding F2).

The context is shared: a request frame passes the processor, waits in the LLM's queue while
the previous response streams, and meanwhile the user aggregator appends to the context
(another turn, a pasted document). The request used to go out over ``max_request_tokens``;
the processor now checks again as the LLM adapter reads the messages
(``context.get_messages(llm_specific_filter=...)``).
"""

from __future__ import annotations

from pipecat.frames.frames import LLMMessagesAppendFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer import ContextSummarizer, ContextSummarizerParams, OpenAISummarizer
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import CeilingParams
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, user_turn

CEILING = 3000
C = EstimateTokenCounter()
DOC = "itinerary Lisbon fare luggage " * 230  # ~1,700 tokens


def _tokens(body: dict) -> int:
    return sum(C.count_message(m) for m in body["messages"])


async def test_a_message_appended_while_the_request_waits_is_counted(openai_server):
    """Turn 2's frame passes the processor (under the ceiling) and waits while the LLM is
    still answering turn 1; a pasted document is appended in that window without a frame
    of its own. Before the fix the request for turn 2 carried it: ~1,800 + 1,700 tokens."""

    def handler(body: dict) -> Reply:
        if is_summary_request(body):
            return Reply("not now", status=500)  # no summary: only eviction can hold it
        last = body["messages"][-1].get("content", "")
        return Reply("Sure.", delay=0.6 if "turn one" in str(last) else 0.0)

    openai_server.handler = handler
    context = LLMContext(
        messages=[
            {"role": "system", "content": "You are a helpful voice assistant."},
            {"role": "user", "content": "first document: " + DOC},
            {"role": "assistant", "content": "Got it."},
        ]
    )
    processor = ContextSummarizer(
        context=context,
        config=cfg(tokens=None, messages=50, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        params=ContextSummarizerParams(ceiling=CeilingParams(max_request_tokens=CEILING)),
    )
    frames = [
        user_turn("turn one, please check my booking"),
        SleepFrame(sleep=0.15),  # the LLM is answering turn one for 0.6 s
        user_turn("turn two"),
        SleepFrame(sleep=0.15),  # turn two's frame has passed the processor by now
        LLMMessagesAppendFrame(
            messages=[{"role": "user", "content": "second document: " + DOC}], run_llm=False
        ),
        SleepFrame(sleep=1.2),
    ]
    await run_test(
        build(context, processor, main_llm(openai_server.base_url)), frames_to_send=frames
    )
    chats = openai_server.chat_requests
    late = [b for b in chats if "second document" in str(b["messages"])]
    assert late, "the appended document never reached the LLM"
    sizes = [_tokens(b) for b in chats]
    assert max(sizes) <= CEILING, sizes
    # nothing was lost: the first document left for the pending queue, not into the void
    assert any("first document" in str(m.get("content")) for m in processor.pending_messages)


async def test_reads_without_a_filter_do_not_evict(openai_server):
    """Only the LLM adapter's read (with ``llm_specific_filter``) is a request being built;
    the aggregators' and the application's reads see the context as it is."""
    context = LLMContext(
        messages=[
            {"role": "system", "content": "s"},
            {"role": "user", "content": DOC * 3},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "now"},
        ]
    )
    processor = ContextSummarizer(
        context=context,
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        params=ContextSummarizerParams(ceiling=CeilingParams(max_request_tokens=CEILING)),
    )
    assert len(context.get_messages()) == 4 and len(context.messages) == 4
    assert processor.pending_messages == []
