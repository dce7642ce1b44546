"""Superseded details lose everywhere, through real pipelines: a real
``LLMContextAggregatorPair``, ``ContextSummarizer`` with the offline extractive summarizer and
a real store (SQLite and PostgreSQL), Pipecat's OpenAI service against the local
OpenAI-protocol server. A detail corrected within a call and across calls: the pinned fact
keeps its key and its history says ``corrected``, the summary states only the corrected value,
as a correction."""

from __future__ import annotations

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.summarizers import ExtractiveSummarizer
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
BOOKING = "Our anniversary dinner is on 14 March, a table for 4 people."
FILLER = [
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Do you have a gluten free menu?",
    "How late is the pool open?",
    "Could you send towels up please?",
]


async def _call(server, store, texts, *, user_id="caller-7", call_id="call-1", recall=None):
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=ExtractiveSummarizer(),
        store=store,
        call_id=call_id,
        user_id=user_id,
        memory=MemoryParams(writer=FAST),
        recall=recall or RecallParams(enabled=False),
    )
    await run_settling(
        build(context, processor, main_llm(server.base_url)),
        frames_to_send=[*turns(texts, gap=2.0)],
    )
    return processor, context


def _booking_facts(processor) -> list:
    return [f for f in processor.pinned_facts if "anniversary dinner" in f.text]


def _stated(messages: list, value: str) -> list[str]:
    """The texts of the requests' non-conversation messages (summary, facts) stating
    ``value`` as current (not as the value it corrects)."""
    found = []
    for m in messages:
        text = str(m.get("content"))
        if m["role"] == "user" and not text.startswith(("Conversation summary", "FACTS", "Noted")):
            if "FACTS" not in text and "Noted" not in text:
                continue  # a caller's turn
        if value in text.replace(f"(corrected from {value})", ""):
            found.append(text)
    return found


async def test_a_detail_corrected_within_a_call_wins_in_facts_summary_and_history(
    openai_server, store_target
):
    store = open_store(store_target)
    try:
        processor, context = await _call(
            openai_server, store, [BOOKING, *FILLER, "Make that 21 March.", "Thanks, that's all."]
        )
        history = await store.fact_history(user_id="caller-7")
    finally:
        await store.close()
    facts = _booking_facts(processor)
    assert [f.text for f in facts] == [
        "Our anniversary dinner is on 21 March, a table for 4 people. (corrected from 14 March)"
    ]
    (key,) = [f.key for f in facts]
    # the store's history: pinned under the key, then corrected under the same key
    events = [(e.action, e.text) for e in history if e.key == key]
    assert [a for a, _ in events] == ["pinned", "corrected"]
    assert "on 14 March," in events[0][1] and "on 21 March," in events[1][1]
    # the summary states only the corrected value, as a correction
    summary = processor.summary_text or ""
    assert "on 21 March, a table for 4 people. (corrected from 14 March)" in summary
    assert "on 14 March" not in summary
    # and the last request the main LLM got states 14 March nowhere but as what it corrects
    last = openai_server.chat_requests[-1]["messages"]
    assert not _stated(last[:-3], "14 March")


async def test_a_detail_corrected_in_a_later_call_keeps_its_key_and_its_history(
    openai_server, store_target
):
    store = open_store(store_target)
    try:
        first, _ = await _call(openai_server, store, [BOOKING, *FILLER], call_id="call-1")
    finally:
        await store.close()
    (before,) = _booking_facts(first)
    assert "14 March" in before.text
    store = open_store(store_target)  # the next call, the same database
    try:
        second, _ = await _call(
            openai_server,
            store,
            ["Hello again.", "About my booking: make that 21 March.", "Thanks."],
            call_id="call-2",
        )
        history = await store.fact_history(user_id="caller-7")
    finally:
        await store.close()
    (after,) = _booking_facts(second)
    assert after.key == before.key
    assert after.text.endswith("on 21 March, a table for 4 people. (corrected from 14 March)")
    actions = [e.action for e in history if e.key == before.key]
    assert actions == ["pinned", "restored", "corrected"]
    last = openai_server.chat_requests[-1]["messages"]
    assert any("(corrected from 14 March)" in str(m["content"]) for m in last)
    assert not _stated(last[:-3], "14 March")


async def test_recall_never_brings_the_old_value_back_as_current(openai_server, store_target):
    said = [BOOKING, "Make that 21 March for the anniversary dinner.", *FILLER, "Is there a gym?"]
    store = open_store(store_target)
    try:
        await _call(openai_server, store, said, call_id="call-1", recall=RecallParams())
    finally:
        await store.close()
    store = open_store(store_target)  # the next call asks about it
    try:
        await _call(
            openai_server,
            store,
            ["Hello again.", "When is our anniversary dinner?"],
            call_id="call-2",
            recall=RecallParams(latency_budget_s=5.0),
        )
    finally:
        await store.close()
    last = openai_server.chat_requests[-1]["messages"]
    (block,) = [m["content"] for m in last if is_recall_message(m)]
    assert "21 March" in block  # what was recalled: the correction
    # the old value is recalled only marked superseded (or left out, the correction in view)
    for line in block.splitlines()[1:]:
        if "14 March" in line.replace("(corrected from 14 March)", ""):
            assert "[superseded: later corrected to 21 March]" in line
    assert any("(corrected from 14 March)" in str(m["content"]) for m in last)
    # and since that correction is in view (the pinned fact), the old snippet is left out
    assert not [
        line
        for line in block.splitlines()
        if "14 March" in line.replace("(corrected from 14 March)", "")
    ]
