"""One record the database refuses never blocks the others: text is made storable, ids that
cannot be stored are refused at construction, a record that still fails is set aside with
one ERROR while the rest are written, and the close never calls lost what was written."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, StoreWriter, open_store
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)


def _m(call: str, i: int, text: str, **kw) -> ArchivedMessage:
    return ArchivedMessage(call, i, "user", text, json.dumps({"content": text}), user_id="u", **kw)


class _Summarizer:
    async def summarize(self, request):
        return "FACTS:\n- x"


async def test_text_no_database_takes_is_made_storable(store_target):
    cut_emoji = "I love this \ud83d and caf\u00e9"  # a browser client cut an emoji in two
    nul = "tool said ok\x00 then more"
    # over PostgreSQL's 1 MB tsvector limit: stored whole, indexed in part
    big = "marmalade " + " ".join(f"w{i}x" for i in range(220_000))
    store = open_store(store_target)
    try:
        await store.write(
            [
                CallRecord("c1", "u", started_at=1000.0),
                _m("c1", 0, cut_emoji),
                _m("c1", 1, nul),
                _m("c1", 2, big),
                FactEvent("c1", 1, "note", "pinned", "a\x00b \udc00", user_id="u"),
                CompactionRecord("c1", 1, 1, True, "tokens", summary="sum \ud800mary", user_id="u"),
            ]
        )
        got = await store.messages("c1")
        assert [m.content for m in got] == [
            "I love this \ufffd and caf\u00e9",
            "tool said ok then more",
            big,
        ]
        assert [h.position for h in await store.search("marmalade", user_id="u")] == [2]
        assert (await store.fact_history(call_id="c1"))[0].text == "ab \ufffd"
        assert (await store.compactions("c1"))[0].summary == "sum \ufffdmary"
    finally:
        await store.close()


def test_ids_that_cannot_be_stored_are_refused_at_construction():
    for field, value in (
        ("user_id", "u" * 3000),
        ("user_id", "alice\x00"),
        ("call_id", "c" * 3000),
        ("call_id", "room\ud83d"),
    ):
        with pytest.raises(ValueError, match=field):
            ContextSummarizer(
                context=LLMContext(),
                config=cfg(),
                summarizer=_Summarizer(),
                store=SQLiteMemoryStore(),
                **{field: value},
            )


async def test_a_refused_record_is_set_aside_and_the_rest_are_written(store_target, logs):
    store = open_store(store_target)
    writer = StoreWriter(store, FAST, name="call c1")
    writer.start()
    good = [_m("c1", i, f"secret words {i}") for i in range(10)]
    poison = _m("c1", 2**70, "secret poison words")  # a position no database can hold
    for record in [*good[:5], poison, *good[5:]]:
        writer.submit(record)
    try:
        assert await writer.close(timeout=10)
        assert [m.position for m in await store.messages("c1")] == list(range(10))
    finally:
        await store.close()
    assert writer.refused == 1 and writer.dropped == 0
    errors = [r["message"] for r in logs if r["level"].name == "ERROR"]
    assert len(errors) == 1 and "set aside" in errors[0] and "secret" not in errors[0]


async def test_the_close_never_calls_lost_what_was_written_after_the_wait(tmp_path, logs):
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=10)
    await store.open()
    lock = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the database
    writer = StoreWriter(store, WriterParams(flush_interval_s=5), name="call c1")
    writer.start()
    for i in range(3):
        writer.submit(_m("c1", i, f"words {i}"))
    try:
        assert not await writer.close(timeout=0.3)  # the write waits for the lock
        lock.execute("ROLLBACK")  # the lock goes: the write that was waiting commits
        for _ in range(200):
            if any("after the wait" in r["message"] for r in logs):
                break
            await asyncio.sleep(0.05)
        assert len(await store.messages("c1")) == 3
    finally:
        lock.close()
        await store.close()
    assert writer.dropped == 0
    assert not [r for r in logs if r["level"].name == "ERROR"]


def _replies(body: dict) -> Reply:
    return Reply("FACTS:\n- topic: tools") if is_summary_request(body) else Reply("Sure.")


async def test_a_call_with_a_nul_in_a_turn_archives_everything(openai_server, store_target):
    openai_server.handler = _replies
    texts = ["my code is 12\x0034 ok", *(f"question {i} about kiwis" for i in range(6))]
    store = open_store(store_target)
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        store=store,
        call_id="nul-call",
        user_id="u",
        memory=MemoryParams(writer=FAST),
    )
    try:
        await run_settling(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=[*turns(texts, gap=0.15)],
        )
        said = [m.content for m in await store.messages("nul-call") if m.role == "user"]
        assert said == ["my code is 1234 ok", *texts[1:]]
        call = await store.call("nul-call")
        assert call is not None and call.ended_by == "end"
    finally:
        await store.close()
