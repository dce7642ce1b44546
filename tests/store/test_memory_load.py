"""A returning caller's memory never makes a frame wait: ``CallRecorder.take_memory()``
never awaits, the call row is written without waiting for the load, a failed load is one
WARNING that says why, and memory later than ``load_timeout_s`` is not applied."""

from __future__ import annotations

import asyncio
import socket

import asyncpg

from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import CallRecord, FactEvent

FAST = WriterParams(flush_interval_s=0.02, max_backoff_s=0.1, write_timeout_s=5)


async def _known_caller(store) -> None:
    await store.write(
        [
            CallRecord("old", "alice", started_at=1000.0, ended_at=1001.0, summary="Likes tea."),
            FactEvent("old", 1, "drink", "pinned", "tea", user_id="alice"),
        ]
    )


async def _settle(recorder: CallRecorder):
    for _ in range(400):
        got = recorder.take_memory()
        if got is not None or not recorder.memory_pending:
            return got
        await asyncio.sleep(0.01)
    raise AssertionError("the memory never settled")


async def test_take_memory_never_waits_and_gives_the_memory_once(store_target):
    store = open_store(store_target)
    try:
        await _known_caller(store)
        recorder = CallRecorder(store, "room-1", "alice", MemoryParams(writer=FAST))
        recorder.start()
        assert recorder.memory_pending
        assert recorder.take_memory() is None  # still loading: returns at once
        facts, earlier = await _settle(recorder)
        assert [f["text"] for f in facts] == ["tea"] and "Likes tea." in earlier
        assert not recorder.memory_pending and recorder.take_memory() is None
        await recorder.end(
            ended_by="end", summary=None, facts=(), messages_in_context=0, compactions=0
        )
        assert (await store.call("room-1")).resumed
    finally:
        await store.close()


async def test_a_locked_store_delays_neither_the_call_row_nor_the_frame(pg_server, logs):
    dsn = pg_server.create_database("memory_locked")
    store = open_store(dsn)
    locker = None
    try:
        await _known_caller(store)
        locker = await asyncpg.connect(dsn)
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE caller_facts IN ACCESS EXCLUSIVE MODE")
        options = MemoryParams(writer=FAST, load_timeout_s=0.3)
        recorder = CallRecorder(store, "room-2", "alice", options)
        recorder.start()
        # the call row is written while the memory's read waits for the lock
        for _ in range(400):
            if await store.call("room-2") is not None:
                break
            await asyncio.sleep(0.01)
        assert await store.call("room-2") is not None
        assert recorder.memory_pending and recorder.take_memory() is None
        await asyncio.sleep(0.4)  # past load_timeout_s: what arrives now is not applied
        assert recorder.take_memory() is None and not recorder.memory_pending
        await lock.rollback()
        await recorder.end(
            ended_by="end", summary=None, facts=(), messages_in_context=0, compactions=0
        )
        assert not (await store.call("room-2")).resumed
        warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
        assert len(warnings) == 1 and "not loaded within" in warnings[0]
    finally:
        if locker is not None:
            await locker.close()
        await store.close()


async def test_a_failed_load_is_one_warning_that_says_why(logs):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = open_store(f"postgresql://nobody:pw@127.0.0.1:{port}/memory", connect_timeout_s=2)
    recorder = CallRecorder(store, "room-3", "alice", MemoryParams(writer=FAST))
    recorder.start()
    assert await _settle(recorder) is None
    assert recorder.take_memory() is None
    await recorder.writer.close(0.1)
    await store.close()
    warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
    loading = [w for w in warnings if "loading caller memory failed" in w]
    assert len(loading) == 1 and "connection refused" in loading[0]
    assert all("pw" not in w for w in warnings)
