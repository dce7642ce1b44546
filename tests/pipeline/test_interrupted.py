"""An answer the caller cut off is marked, through real pipelines: a real
``LLMContextAggregatorPair`` (whose assistant aggregator writes the partial answer to the
context on the ``InterruptionFrame``, as in a call), ``ContextSummarizer``, Pipecat's OpenAI
service against the local OpenAI-protocol server. The answer streams into the assistant
aggregator (``LLMFullResponseStartFrame`` and ``LLMTextFrame``\\ s, what the main LLM and the
TTS pass on while the bot speaks) and the barge-in lands mid-answer; the control run lets the
same answer finish (``LLMFullResponseEndFrame``)."""

from __future__ import annotations

import json

from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._compaction.prompt import build_request, parse_request
from pipecat_summarizer._record.interrupted import INTERRUPTED_KEY, archived_form, provider_form
from pipecat_summarizer.params import CeilingParams, ContextSummarizerParams, RetryParams
from pipecat_summarizer.summarizers import ExtractiveSummarizer
from tests.support.openai_server import FakeOpenAIServer
from tests.support.pipeline_utils import build, cfg, main_llm, scripted, turns, user_turn
from tests.support.settle import Gap, run_settling

PARTIAL = "I found your order QX-5521 from last week, and it was delivered to"
FILLER = [f"filler turn {i} " + "about lunch ideas and recipes " * 8 for i in range(10)]


def _answer(interrupt: bool) -> list:
    """The bot's answer streaming to the assistant aggregator, and the barge-in (or its end)."""
    return [
        user_turn("Hi, a table for four on Friday please."),
        Gap(sleep=0.3),
        LLMFullResponseStartFrame(),
        LLMTextFrame(PARTIAL),
        Gap(sleep=0.2),
        InterruptionFrame() if interrupt else LLMFullResponseEndFrame(),
        Gap(sleep=0.2),
    ]


async def _call(server, *, interrupt: bool, config=None, params=None, more=(), summarizer=None):
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    processor = ContextSummarizer(
        context=context,
        config=config or cfg(messages=50),
        summarizer=summarizer or ExtractiveSummarizer(),
        params=params,
    )
    frames = [*_answer(interrupt), *turns(["Wait, can we make it Saturday?", *more], gap=0.25)]
    await run_settling(build(context, processor, main_llm(server.base_url)), frames_to_send=frames)
    return processor, context


def _the_answer(context) -> dict:
    (answer,) = [m for m in context.messages if str(m.get("content")).startswith("I found")]
    return answer


async def test_a_barge_in_mid_answer_marks_the_answer_and_only_it(openai_server):
    processor, context = await _call(openai_server, interrupt=True)
    answer = _the_answer(context)
    assert processor.record.interruptions.cut == [answer]  # by identity, nothing else
    assert answer.keys() == {"role", "content"}  # the live message is never changed
    # the main LLM got it as it is: no key a provider does not know
    last = openai_server.chat_requests[-1]["messages"]
    assert all(set(m) <= {"role", "content"} for m in last)
    # the summarizer's transcript marks it; the extractive summarizer takes no decision or
    # fact from it (what the caller heard of it ends mid-sentence)
    request = build_request(
        context.messages[1:],
        previous_summary=None,
        max_tokens=300,
        interrupted=processor.record.interruptions.ids(),
    )
    assert '"interrupted":"the caller cut this answer off and heard only this part"' in (
        request.user_message
    )
    assert 'A line marked "interrupted"' in request.system_prompt
    parsed = parse_request(request.user_message)
    assert parsed is not None
    assert [parsed[0].messages[i]["content"] for i in parsed[0].interrupted] == [answer["content"]]
    summary = (await ExtractiveSummarizer().summarize(request)).text
    assert "QX-5521" not in summary and "I found" not in summary


async def test_an_answer_that_finished_is_not_marked(openai_server):
    processor, context = await _call(openai_server, interrupt=False)
    answer = _the_answer(context)
    assert processor.record.interruptions.cut == []
    request = build_request(
        context.messages[1:],
        previous_summary=None,
        max_tokens=300,
        interrupted=processor.record.interruptions.ids(),
    )
    assert "interrupted" not in request.user_message
    summary = (await ExtractiveSummarizer().summarize(request)).text
    assert f"Assistant: {answer['content']}" in summary  # heard whole: a fact


async def test_a_cut_answer_evicted_is_never_pinned():
    async def run(interrupt: bool) -> list[str]:
        server = FakeOpenAIServer(scripted(status=503))  # no summary: the ceiling evicts
        await server.start()
        summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
        try:
            processor, _ = await _call(
                server,
                interrupt=interrupt,
                summarizer=summarizer,
                config=cfg(tokens=600, messages=None, keep=2),
                params=ContextSummarizerParams(
                    ceiling=CeilingParams(max_request_tokens=700),
                    retry=RetryParams(backoff_s=0),
                ),
                more=FILLER,
            )
            evicted = json.dumps(processor.pending_messages)
            assert "QX-5521" in evicted  # the answer left the context unsummarized
            return [f.text for f in processor.pinned_facts]
        finally:
            await summarizer.aclose()
            await server.stop()

    assert any("QX-5521" in f for f in await run(interrupt=False))  # heard whole: pinned
    assert not any("QX-5521" in f for f in await run(interrupt=True))  # cut: never


def test_the_archived_form_carries_the_mark_and_the_provider_form_drops_it():
    message = {"role": "assistant", "content": PARTIAL}
    archived = archived_form(message, cut=True)
    assert archived[INTERRUPTED_KEY] is True and INTERRUPTED_KEY not in message
    assert provider_form(json.loads(json.dumps(archived))) == message
    assert archived_form(message, cut=False) is message
    assert provider_form(message) is message


async def test_the_processors_own_summary_and_the_archive_mark_a_cut_answer(
    openai_server, store_target
):
    """The summary request the processor sends marks the cut answer, and the archive keeps the
    mark in the answer's ``message_json`` (a resumed call sends it without the mark)."""
    from pipecat_summarizer.params import MemoryParams, WriterParams
    from pipecat_summarizer.store import open_store

    store = open_store(store_target)
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        store=store,
        memory=MemoryParams(writer=WriterParams(flush_interval_s=0.05)),
    )
    frames = [*_answer(True), *turns(["Wait, can we make it Saturday?", *FILLER[:4]], gap=0.25)]
    try:
        await run_settling(
            build(context, processor, main_llm(openai_server.base_url)), frames_to_send=frames
        )
        archived = await store.messages(processor.call_id or "")
    finally:
        await summarizer.aclose()
        await store.close()
    marked = [
        r
        for r in openai_server.summary_requests
        if PARTIAL in json.dumps(r) and "heard only this part" in json.dumps(r)
    ]
    assert marked, "the cut answer went to the summarizer unmarked"
    (cut,) = [a for a in archived if a.content.startswith("I found")]
    assert json.loads(cut.message_json).get(INTERRUPTED_KEY) is True
    others = [a for a in archived if not a.content.startswith("I found")]
    assert others and all(INTERRUPTED_KEY not in json.loads(a.message_json) for a in others)
