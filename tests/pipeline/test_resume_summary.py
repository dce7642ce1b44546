"""What a summary of a resumed call holds: the dropped call's details and the tool call whose
result was lost at the drop (an open question), never the resume's notice as the caller's words
("User: The caller's previous connection dropped ..."). The notice is the application's text in
a user-role message, as the summary message is (never system/developer: it names the pending
call's arguments, which come from the conversation), written as a record under the summary's
headings, so a summarizer reads it as the application's record. Real pipelines (Pipecat's
OpenAI service against the local server, real aggregators, the offline summarizer), SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer
from pipecat_summarizer.params import MemoryParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.summarizers import ExtractiveSummarizer
from tests.pipeline.test_resume_dropped import (
    AGAIN,
    CALL_1,
    FAST,
    SYSTEM,
    TOOL,
    assert_paired,
    call,
    handler,
    notices,
)
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import Gap, run_settling

LATER = ["Thanks for holding on.", "Is the parcel still on its way?", "Please check again."]


async def resumed_call(server, target: str) -> ContextSummarizer:
    """Call 2 of ``alice``: it resumes the dropped call, then summarizes with the offline
    summarizer what it restored, the notice included."""
    store = open_store(target)
    await store.calls("alice", limit=1)  # opened first: the memory loads within the pause
    context = LLMContext(messages=[dict(SYSTEM)])
    schema = FunctionSchema(name=TOOL, description=".", properties={}, required=[])
    context.set_tools(ToolsSchema(standard_tools=[schema]))
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=10, keep=2),
        summarizer=ExtractiveSummarizer(),
        store=store,
        call_id="room-2",
        user_id="alice",
        memory=MemoryParams(writer=FAST, resume_dropped_within_s=120.0),
    )
    llm = main_llm(server.base_url)
    never = asyncio.Event()

    async def lookup(params):
        await never.wait()

    llm.register_function(TOOL, lookup)
    frames = [Gap(sleep=0.5), *turns([AGAIN, *LATER], gap=0.4)]
    try:
        await run_settling(build(context, processor, llm), frames_to_send=frames)
    finally:
        await store.close()
    return processor


async def test_a_summary_of_a_resumed_call_never_reads_the_notice_as_the_caller(
    openai_server, store_target
):
    openai_server.handler = handler
    await call(openai_server, store_target, "room-1", CALL_1, end="cancel")
    openai_server.requests.clear()
    processor = await resumed_call(openai_server, store_target)
    # the first request the resume joined (on a loaded machine it may load a turn late)
    resumed = next(r["messages"] for r in openai_server.chat_requests if notices(r["messages"]))
    assert_paired(resumed)
    (note,) = notices(resumed)
    assert note["role"] == "user"  # application text with the call's arguments: never system
    summary = processor.summary_text
    assert summary is not None
    lowered = summary.lower()
    # the notice is never the caller's line
    assert "previous connection" not in lowered and "restored from" not in lowered, summary
    assert "[note from the system" not in lowered, summary
    user_items = [line for line in summary.splitlines() if line.startswith("- User:")]
    assert not any("connection" in line.lower() for line in user_items), summary
    # what it must hold: the dropped call's details, and the lost result as an open question
    assert "4417" in summary
    open_part = summary.split("OPEN QUESTIONS:", 1)[1]
    assert TOOL in open_part and "result was lost" in open_part, summary
