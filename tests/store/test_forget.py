"""``forget(user_id)`` forgets: a live call does not write the caller back at hang-up (a
forget by this store object or by another process), and nothing of their words stays in
the SQLite files."""

from __future__ import annotations

import asyncio
import json
import time

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
WORD = "Quetzalcoatlus"


def _replies(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply(f"FACTS:\n- pet: a {WORD} named Rex")
    return Reply("Sure thing.")


async def _call(server, store, *, texts, forget_after=None, admin=None):
    context = LLMContext(messages=[{"role": "system", "content": "Be brief."}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        call_id="room-1",
        user_id="alice",
        memory=MemoryParams(writer=FAST),
    )
    processor.pin("pet", f"Alice has a {WORD}")

    async def forget_mid_call():
        while len(server.chat_requests) < forget_after:
            await asyncio.sleep(0.01)
        await (admin or store).forget("alice")

    forgetting = asyncio.ensure_future(forget_mid_call()) if forget_after else None
    await run_settling(
        build(context, processor, main_llm(server.base_url)),
        frames_to_send=[*turns(texts, gap=0.15)],
    )
    if forgetting is not None:
        await forgetting


async def _nothing_of_alice(store) -> None:
    assert await store.calls("alice") == []
    assert await store.search(WORD) == [] and await store.search("parrots") == []
    assert await store.fact_history(user_id="alice") == []
    memory = await store.caller_memory("alice")
    assert memory.facts == [] and memory.summaries == [] and memory.calls == 0


async def test_a_forget_by_another_process_during_a_call_is_not_undone(openai_server, store_target):
    openai_server.handler = _replies
    first = [f"My pet is a {WORD}.", *(f"question {i} about parrots" for i in range(6))]
    store = open_store(store_target)
    admin = open_store(store_target)  # the operator's tool: another store, another process
    try:
        await _call(openai_server, store, texts=first)
        openai_server.requests.clear()
        again = ["it's me again", *(f"more parrots {i}" for i in range(6))]
        await _call(openai_server, store, texts=again, forget_after=2, admin=admin)
        await _nothing_of_alice(admin)
    finally:
        await store.close()
        await admin.close()


async def test_a_forget_by_the_calls_own_store_stops_it_at_once(openai_server, tmp_path):
    openai_server.handler = _replies
    store = SQLiteMemoryStore(tmp_path / "memory.db")
    try:
        await _call(openai_server, store, texts=[f"My pet is a {WORD}.", "parrots"])
        before = store.forget_generation("alice")
        openai_server.requests.clear()
        texts = ["hello", *(f"parrots {i}" for i in range(6))]
        await _call(openai_server, store, texts=texts, forget_after=2)
        assert store.forget_generation("alice") == before + 1
        await _nothing_of_alice(store)
    finally:
        await store.close()


def _m(call: str, i: int, text: str, user: str) -> ArchivedMessage:
    return ArchivedMessage(call, i, "user", text, json.dumps({"content": text}), user_id=user)


async def test_an_earlier_sessions_late_writes_are_refused_after_a_forget(store_target):
    worker, admin = open_store(store_target), open_store(store_target)
    try:
        started = time.time() - 5
        await worker.write(
            [CallRecord("s1", "alice", started_at=started), _m("s1", 0, "hi", "alice")]
        )
        await admin.forget("alice")  # another process
        # the live session's later records (its hang-up) are refused; a new call is not
        await worker.write(
            [
                _m("s1", 1, f"my {WORD}", "alice"),
                FactEvent("s1", 1, "pet", "pinned", WORD, user_id="alice"),
                CallRecord("s1", "alice", started_at=started, ended_at=time.time(), summary=WORD),
                _m("b1", 0, "bob's words", "bob"),
            ]
        )
        assert await worker.calls("alice") == [] and await worker.search(WORD) == []
        assert [h.content for h in await worker.search("words")] == ["bob's words"]
        await worker.write(
            [CallRecord("s2", "alice", started_at=time.time() + 1), _m("s2", 0, "new me", "alice")]
        )
        assert [c.call_id for c in await worker.calls("alice")] == ["s2"]
    finally:
        await worker.close()
        await admin.close()


async def test_nothing_of_the_forgotten_words_stays_in_the_sqlite_files(tmp_path):
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path)
    try:
        records = [CallRecord("a1", "alice", started_at=1000.0)]
        records += [_m("a1", i, f"my {WORD} number {i} eats figs", "alice") for i in range(50)]
        records += [FactEvent("a1", 1, "pet", "pinned", f"a {WORD}", user_id="alice")]
        records += [_m("b1", i, f"bob likes plain figs {i}", "bob") for i in range(50)]
        for i in range(0, len(records), 10):  # several transactions: several index segments
            await store.write(records[i : i + 10])
        assert await store.search(WORD.lower(), user_id="alice")
        await store.forget("alice")
        for suffix in ("", "-wal", "-shm"):
            file = path.with_name(path.name + suffix)
            data = file.read_bytes().lower() if file.exists() else b""
            assert b"quetzalcoat" not in data, file.name
        assert len(await store.search("figs", user_id="bob", limit=100)) == 50
    finally:
        await store.close()


async def test_postgres_vacuums_the_tables_a_forget_touched(pg_server):
    """PostgreSQL keeps deleted rows as dead tuples until a vacuum: forget runs one on the
    tables it touched, after its commit."""
    import asyncpg

    dsn = pg_server.create_database("forget_vacuum")
    store = open_store(dsn)
    try:
        await store.write(
            [CallRecord("a1", "alice", started_at=1000.0)]
            + [_m("a1", i, f"my {WORD} {i}", "alice") for i in range(20)]
        )
        await store.forget("alice")
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        vacuumed = await conn.fetch(
            "SELECT relname FROM pg_stat_user_tables WHERE vacuum_count > 0 ORDER BY relname"
        )
    finally:
        await conn.close()
    assert {r["relname"] for r in vacuumed} >= {"messages", "calls", "facts", "compactions"}


async def test_a_forget_by_another_store_is_noticed_once_from_its_tombstone(store_target):
    live, admin = open_store(store_target), open_store(store_target)
    try:
        await live.write([CallRecord("s1", "alice", started_at=time.time())])
        since = time.time()
        assert await live.forgotten_at("alice") is None
        assert not await live.noticed_forget("alice", since)
        await admin.forget("alice")
        assert await live.forgotten_at("alice") >= since
        assert await live.noticed_forget("alice", since)  # counted here, once
        assert not await live.noticed_forget("alice", since)
        assert live.forget_generation("alice") == 1
        # a forget before this call started is not this call's business
        assert not await live.noticed_forget("alice", time.time() + 60)
    finally:
        await live.close()
        await admin.close()
